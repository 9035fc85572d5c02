#include "offload/swap_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/memory_pool.h"

namespace zt {

SwapFile::SwapFile(const std::string& dir, const std::string& name, size_t bytes, const std::string& config_key)
    : bytes_(align_up(bytes)) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw UsageError(cat(config_key, ": ", dir, ": ", std::strerror(errno)));
  }
  ZT_USAGE_CHECK(S_ISDIR(st.st_mode), config_key, ": ", dir, ": not a directory");
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const size_t free_bytes = size_t(vfs.f_bavail) * size_t(vfs.f_frsize);
    ZT_USAGE_CHECK(free_bytes >= bytes_, config_key, ": ", dir, ": needs ", bytes_, " bytes for ", name,
                   " but only ", free_bytes, " are free");
  }
  path_ = cat(dir, "/zerotrain-", ::getpid(), "-", name, ".swap");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd_ < 0 && errno == EINVAL) {
    log_warn(dir, " does not support O_DIRECT (tmpfs?): swapping through the page cache");
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  } else {
    direct_ = fd_ >= 0;
  }
  if (fd_ < 0) throw UsageError(cat(config_key, ": cannot create ", path_, ": ", std::strerror(errno)));
  ::unlink(path_.c_str());  // gone when the last descriptor closes, whatever ends the process
  const int rc = ::posix_fallocate(fd_, 0, off_t(bytes_));
  if (rc != 0) {
    ::close(fd_);
    throw UsageError(cat(config_key, ": cannot reserve ", bytes_, " bytes in ", dir, " for ", name, ": ",
                         std::strerror(rc)));
  }
  pool_counter(Pool::kNvme).add(bytes_);
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    pool_counter(Pool::kNvme).sub(bytes_);
  }
}

}  // namespace zt
