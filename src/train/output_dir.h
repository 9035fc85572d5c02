// The output directory rule HF Trainer users expect: an existing, non-empty output_dir is an
// error unless --overwrite_output_dir; nothing is written before this check. And one job per
// output directory: rank 0 holds an exclusive flock(2) on `<output_dir>/.zerotrain.lock` for the
// job's life (the kernel drops it when the process dies, kill -9 included), so a second job on
// the same directory stops before it writes anything instead of interleaving metrics and
// overwriting checkpoints.
#pragma once

#include <string>

namespace zt {

/// The lock file's name inside the output directory. It is never removed (removing it would let a
/// waiting job lock a file nobody else can find) and does not make a directory "non-empty".
inline constexpr const char* kOutputDirLockName = ".zerotrain.lock";

/// Holds the output directory's lock until destroyed (or the process ends).
class OutputDirLock {
 public:
  OutputDirLock() = default;
  OutputDirLock(OutputDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();

  /// Creates the lock file if needed, takes the lock and records this host and pid in it.
  /// Throws UsageError naming the directory and the holder's host and pid if another job has it.
  static OutputDirLock acquire(const std::string& dir);

 private:
  int fd_ = -1;
};

/// Throws UsageError if `dir` exists and is not a directory, is locked by another job, or holds
/// files (the lock file aside) and `overwrite` is false. Writes nothing.
void check_output_dir_usable(const std::string& dir, bool overwrite);
/// Checks, creates `dir` if needed and takes its lock for the life of the returned object.
OutputDirLock prepare_output_dir(const std::string& dir, bool overwrite);

}  // namespace zt
