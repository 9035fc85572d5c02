// A scratch file for the harnesses whose reader takes a path, not text (safetensors, token shards,
// JSONL): the input is written to it, the reader opens it as it opens a user's file. One file per
// process and name (libFuzzer's -jobs run several processes), rewritten for each input, removed at
// exit. In memory (/dev/shm) unless TMPDIR says otherwise: rewriting a file 20,000 times on a
// disk-backed /tmp took 4-25 s of a ctest run on a busy 2-core machine, in /dev/shm under 1 s.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace zt::fuzz {

class TempFile {
 public:
  /// `name` ends the file's name: "model.safetensors", "docs.jsonl".
  explicit TempFile(const std::string& name)
      : path_((scratch_dir() / ("zt_fuzz_" + std::to_string(::getpid()) + "_" + name)).string()) {}
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

  /// Replaces the file's bytes with `bytes`; returns its path. A failure here is the machine's,
  /// not the reader's: it stops the run with the reason.
  const std::string& write(std::string_view bytes) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    size_t done = 0;
    while (fd >= 0 && done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += size_t(n);
    }
    if (fd < 0 || done != bytes.size() || ::close(fd) != 0) {
      std::perror(path_.c_str());
      std::exit(2);
    }
    return path_;
  }

 private:
  static std::filesystem::path scratch_dir() {
    if (!std::getenv("TMPDIR") && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
    return std::filesystem::temp_directory_path();
  }

  std::string path_;
};

}  // namespace zt::fuzz
