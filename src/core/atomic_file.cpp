#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace zt {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw Error(cat(path, ": ", what, " failed: ", std::strerror(err)));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZT_USAGE_CHECK(fd_ >= 0, tmp_, ": cannot create: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!published_) ::unlink(tmp_.c_str());
  published_ = true;  // nothing left to remove
}

void AtomicFile::write(const void* data, size_t bytes) {
  ZT_CHECK(fd_ >= 0, tmp_, ": write after close");
  if (const int err = write_fully(fd_, data, bytes)) {
    discard();
    fail(tmp_, "write", err);
  }
}

int write_fully(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    p += n;
    bytes -= size_t(n);
  }
  return 0;
}

void AtomicFile::close(bool durable) {
  ZT_CHECK(fd_ >= 0, tmp_, ": closed twice");
  if (durable && ::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    fail(tmp_, "fsync", err);
  }
  const int fd = fd_;
  fd_ = -1;
  // Linux releases the descriptor even when close fails (a network file system may report a
  // failed write only here), so it is not retried; the temporary goes.
  if (::close(fd) != 0) {
    const int err = errno;
    discard();
    fail(tmp_, "close", err);
  }
}

void AtomicFile::publish(bool durable) {
  ZT_CHECK(fd_ < 0 && !published_, tmp_, ": publish needs a closed, unpublished file");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    discard();
    fail(tmp_ + " -> " + path_, "rename", err);
  }
  published_ = true;
  if (durable) {
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    sync_to_disk(dir.empty() ? "." : dir);
  }
}

void sync_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    fail(path, "fsync", err);
  }
  ::close(fd);
}

void write_file_atomically(const std::string& path, std::string_view text, bool durable) {
  AtomicFile file(path);
  file.write(text);
  file.commit(durable);
}

}  // namespace zt
