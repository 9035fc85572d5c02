// Opening the files a user names (configs, manifests, `latest`, token shards, safetensors, HDF5
// shards): regular files only, symlinks followed. A character device (/dev/zero) would be read
// forever, a FIFO would block the open forever, a directory or a symlink loop would fail later
// with a vague message; each is refused here at once with one line naming the path.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

/// The most a JSON file zerotrain reads may hold: DeepSpeed and HF configs are a few KiB, the
/// manifest of the largest model the ranges allow about 2 MiB. Anything bigger is the wrong
/// file (a dataset, a tarball), refused before it is read into memory.
inline constexpr uint64_t kMaxJsonBytes = uint64_t(64) << 20;

/// An open, read-only descriptor of a regular file and its size; closes itself.
class RegularFile {
 public:
  /// Throws UsageError "<path>: cannot open file: <why>" (a symlink loop says so) or
  /// "<path>: not a regular file (<kind>)". Never blocks: a FIFO is opened O_NONBLOCK and refused.
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  /// Hands the descriptor to the caller, who closes it.
  int release();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// For paths a library opens itself (HDF5): the same checks as RegularFile, by stat.
void require_regular_file(const std::string& path);

/// The whole file, refused with "<path>: <n> bytes, more than the <max> a <what> may hold" when
/// larger than `max_bytes`.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what);

}  // namespace zt
