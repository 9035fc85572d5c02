#include "train/checked_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace zt {

CheckedFile::CheckedFile(std::string path, Mode mode) : path_(std::move(path)) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0666);
  ZT_USAGE_CHECK(fd_ >= 0, path_, ": cannot open for writing: ", std::strerror(errno));
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void CheckedFile::write(std::string_view bytes) {
  ZT_CHECK(fd_ >= 0, path_, ": write after close");
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  if (const int err = write_fully(fd_, bytes.data(), bytes.size())) {
    // A full disk takes part of a record: cut it off, so the file ends with a whole line
    // (every line of metrics.jsonl parses) rather than a torn one.
    if (start >= 0) (void)::ftruncate(fd_, start);
    throw_error(__FILE__, __LINE__, cat(path_, ": write failed: ", std::strerror(err)));
  }
}

void CheckedFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // Linux releases the descriptor even when close fails, so it is never retried.
  if (::close(fd) != 0) throw_error(__FILE__, __LINE__, cat(path_, ": close failed: ", std::strerror(errno)));
}

}  // namespace zt
