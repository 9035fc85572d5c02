// A file that appears under its name complete or not at all: written to `<path>.tmp`, every
// write and the close checked, fsync'ed when durable, then renamed over `path` (and the
// directory fsync'ed). Destroyed before commit() (an error, an exception on the way), it removes
// the temporary, so a failed writer leaves neither a torn file under the final name nor a stray
// temporary. zero_to_fp32's exports and zero_prepare_data's shards are written this way.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zt {

class AtomicFile {
 public:
  /// Creates (truncating) `path`.tmp; throws UsageError naming it when it cannot.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Writes all `bytes`; throws zt::Error naming the file and the system's reason (a full disk:
  /// "No space left on device").
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// fsync (when `durable`) and close the temporary, checked; on failure the temporary is
  /// removed. Several files that belong together close first, then publish, so that a failure
  /// leaves none of them renamed.
  void close(bool durable);
  /// Renames the closed temporary over the final name and fsyncs the directory (when `durable`).
  void publish(bool durable);
  /// close, then publish. On failure the final name keeps whatever it held before.
  void commit(bool durable) {
    close(durable);
    publish(durable);
  }

  const std::string& path() const { return path_; }

 private:
  void discard() noexcept;
  std::string path_, tmp_;
  int fd_ = -1;
  bool published_ = false;
};

/// write(2) until all `bytes` are written, retrying after EINTR and short writes. Returns 0, or
/// the errno of the write that failed (EIO for one that wrote nothing). What part of the data
/// reached the file before a failure is up to the caller to undo.
int write_fully(int fd, const void* data, size_t bytes);

/// fsync(2) of a file or directory, by path; throws zt::Error naming it.
void sync_to_disk(const std::string& path);

/// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view text, bool durable);

}  // namespace zt
