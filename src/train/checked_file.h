// A file the trainer writes as it goes (metrics.jsonl, a monitor's event file or CSV): a POSIX
// descriptor whose every write and close is checked. A failure throws zt::Error naming the file
// and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace zt {

class CheckedFile {
 public:
  enum class Mode {
    kTruncate,  ///< create or empty it (Python's "wb")
    kAppend,    ///< create or append to it (Python's "a+")
  };

  /// Opens `path`; throws UsageError naming it (and strerror) when it cannot be opened.
  CheckedFile(std::string path, Mode mode);
  /// Closes without reporting (destructors must not throw); call close() to see a failure.
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  /// Writes all of `bytes` to the file (one write(2) unless it is cut short); throws zt::Error
  /// naming the file on failure, after cutting off whatever part of `bytes` did reach it (a full
  /// disk leaves the file ending with the last whole record). Nothing is buffered here: once this returns, the bytes are in
  /// the kernel and survive a crash of this process.
  void write(std::string_view bytes);
  /// Closes the file; throws zt::Error naming it when close(2) reports an error (a network file
  /// system may report a failed write only here). Idempotent.
  void close();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace zt
