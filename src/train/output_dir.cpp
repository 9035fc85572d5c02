#include "train/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace zt {

namespace {

std::string lock_path(const std::string& dir) { return dir + "/" + kOutputDirLockName; }

// "host H, pid P" as the holder wrote it (it writes right after locking, so a job that starts
// within that instant may find the file empty).
std::string holder_of(int fd) {
  char text[300] = {};
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  std::string line(text, n > 0 ? size_t(n) : 0);
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "holder not yet recorded" : line;
}

[[noreturn]] void throw_in_use(const std::string& dir, int fd) {
  const std::string holder = holder_of(fd);
  close(fd);
  throw UsageError(cat(dir, ": --output_dir is in use by another job (", holder,
                       "); wait for it to end or choose another --output_dir"));
}

// True if the directory holds anything besides the lock file.
bool has_entries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() != kOutputDirLockName) return true;
  }
  ZT_USAGE_CHECK(!ec, dir, ": cannot list --output_dir: ", ec.message());
  return false;
}

}  // namespace

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (see kOutputDirLockName)
}

OutputDirLock OutputDirLock::acquire(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  ZT_USAGE_CHECK(fd >= 0, path, ": cannot open the output directory's lock file: ", std::strerror(errno));
  // A job that is only checking the directory (check_output_dir_usable) holds a shared lock for
  // an instant, so a refusal is retried for a second before it counts; a running job holds it
  // for its whole life.
  int tries = 0;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK && ++tries < 20) {
      usleep(50'000);
      continue;
    }
    if (errno == EWOULDBLOCK) throw_in_use(dir, fd);
    const int err = errno;
    close(fd);
    throw UsageError(cat(path, ": cannot lock the output directory: ", std::strerror(err)));
  }
  OutputDirLock lock;
  lock.fd_ = fd;
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const std::string line = cat("host ", host, ", pid ", getpid(), "\n");
  // Who holds it is for the message of a job that finds it taken; the lock works without it.
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line.data(), line.size(), 0) != ssize_t(line.size())) {
    throw UsageError(cat(path, ": cannot write the output directory's lock file: ", std::strerror(errno)));
  }
  return lock;
}

void check_output_dir_usable(const std::string& dir, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  ZT_USAGE_CHECK(fs::is_directory(dir, ec), dir, ": --output_dir exists and is not a directory");
  // A job that holds the directory is the better message than "not empty", and it must come
  // first: --overwrite_output_dir does not make two jobs in one directory safe.
  const int fd = open(lock_path(dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) throw_in_use(dir, fd);
    close(fd);
  }
  ZT_USAGE_CHECK(overwrite || !has_entries(dir), dir,
                 ": --output_dir exists and is not empty; pass --overwrite_output_dir to write into it");
}

OutputDirLock prepare_output_dir(const std::string& dir, bool overwrite) {
  check_output_dir_usable(dir, overwrite);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ZT_USAGE_CHECK(!ec, dir, ": cannot create --output_dir: ", ec.message());
  // The check above only chose the message; the lock decides, should two jobs start together.
  return OutputDirLock::acquire(dir);
}

}  // namespace zt
