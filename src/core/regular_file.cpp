#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace zt {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void throw_open_error(const std::string& path, int err) {
  // ELOOP's own text is clear enough; say what usually causes it.
  throw UsageError(cat(path, ": cannot open file: ", std::strerror(err),
                       err == ELOOP ? " (a symbolic link loop?)" : ""));
}

void check_mode(const std::string& path, mode_t mode) {
  if (!S_ISREG(mode)) throw UsageError(cat(path, ": not a regular file (", file_kind(mode), ")"));
}

}  // namespace

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_open_error(path, errno);
  check_mode(path, st.st_mode);
}

RegularFile::RegularFile(const std::string& path) {
  // stat first, so that a device is never opened at all; then open without blocking (a FIFO put
  // there in between would otherwise wait for a writer) and check what was opened.
  require_regular_file(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw_open_error(path, errno);
  struct stat st {};
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  const int err = errno;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    if (!stat_ok) throw_open_error(path, err);
    check_mode(path, st.st_mode);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = uint64_t(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }

int RegularFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what) {
  RegularFile file(path);
  ZT_USAGE_CHECK(file.size() <= max_bytes, path, ": ", file.size(), " bytes, more than the ", max_bytes, " a ", what,
                 " may hold (is it the right file?)");
  std::string text(file.size(), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(file.fd(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ZT_USAGE_CHECK(n >= 0, path, ": read error: ", std::strerror(errno));
    if (n == 0) break;  // shrank while we read: take what is there
    done += size_t(n);
  }
  text.resize(done);
  return text;
}

}  // namespace zt
