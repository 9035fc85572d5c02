#include "core/log.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <unistd.h>

namespace zt {

namespace {
std::string g_program = "zerotrain";
int g_rank = 0;
LogLevel g_level = [] {
  const char* env = std::getenv("ZT_LOG_LEVEL");
  if (!env) return LogLevel::kInfo;
  if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(env, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(env, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}();
std::mutex g_mutex;
std::string g_status;  // the live status line, "" when none is drawn
}  // namespace

// The first failed write of a log line (a full disk under a redirected stderr): reported by
// check_log_written, since a log line about it could not be written either.
static int g_write_errno = 0;

void set_log_program(const std::string& name) { g_program = name; }
void set_log_rank(int rank) { g_rank = rank; }
void set_log_level(LogLevel level) { g_level = level; }

void log_line(LogLevel level, const std::string& message) {
  if (level < g_level) return;
  if (level <= LogLevel::kInfo && g_rank != 0) return;
  static const char* kTags[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* clear = g_status.empty() ? "" : "\r\033[K";
  const int printed = std::fprintf(stderr, "%s%s: %s%s\n%s", clear, g_program.c_str(), kTags[int(level)],
                                   message.c_str(), g_status.c_str());
  if ((printed < 0 || std::fflush(stderr) != 0) && g_write_errno == 0) g_write_errno = errno ? errno : EIO;
}

void check_log_written() {
  int err = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    err = g_write_errno;
  }
  if (err == 0) return;
  char target[4096] = {};
  const ssize_t n = readlink("/proc/self/fd/2", target, sizeof(target) - 1);
  throw Error(cat(n > 0 ? std::string(target, size_t(n)) : std::string("stderr"),
                  ": writing the log failed: ", std::strerror(err)));
}

bool log_is_terminal() { return isatty(STDERR_FILENO) != 0; }

void set_status_line(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (text.empty() && g_status.empty()) return;
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
  g_status = text;
}

}  // namespace zt
