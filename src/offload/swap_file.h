// A per-rank file on NVMe that holds swapped-out state (ZeRO-Infinity).
//
// Everything that can go wrong with nvme_path is found when the file is created, at start-up:
// a missing or unwritable directory, or too little free space (the whole size is reserved with
// posix_fallocate, so the disk cannot fill up under a running job). The file is opened with
// O_DIRECT so swaps bypass the page cache (a file system without O_DIRECT, such as tmpfs, falls
// back to buffered I/O with a warning), and it is unlinked as soon as it is open: it disappears
// when the process ends, cleanly or not, and an aborted job never leaves hundreds of GB behind.
#pragma once

#include <cstddef>
#include <string>

namespace zt {

class SwapFile {
 public:
  /// Creates `dir`/zerotrain-<pid>-<name>.swap of `bytes` (rounded up to 4096). `config_key` names the
  /// setting that chose `dir`, for messages ("zero_optimization.offload_optimizer.nvme_path").
  /// Throws UsageError for a bad directory or too little space.
  SwapFile(const std::string& dir, const std::string& name, size_t bytes, const std::string& config_key);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  size_t bytes() const { return bytes_; }
  /// True when opened with O_DIRECT: buffers, offsets and sizes must then be 4096-aligned.
  bool direct() const { return direct_; }

 private:
  std::string path_;
  size_t bytes_ = 0;
  int fd_ = -1;
  bool direct_ = false;
};

/// Alignment for O_DIRECT buffers, offsets and sizes.
inline constexpr size_t kDirectAlignment = 4096;
inline size_t align_up(size_t bytes, size_t alignment = kDirectAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace zt
