// Error types and check macros. Deep code throws; each entry point catches once at the top,
// prints one line and exits (tools) or ends every rank (the trainer). Bad user input is a
// UsageError (exit code 2); a broken invariant or a failed system call is an Error (exit code 1).
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

/// Concatenates anything streamable: cat("rank ", r, ": ", what).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

/// An internal failure: a library call failed, an invariant broke. Exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A memory pool could not allocate: at start-up, a configuration too large for this machine.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// Bad input from the user: a config key, a file, a flag. The message names the culprit and
/// nothing has been written yet. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& what);

}  // namespace zt

/// Throws zt::Error with file:line when `cond` is false.
#define ZT_CHECK(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) ::zt::throw_error(__FILE__, __LINE__, ::zt::cat("check failed: " #cond " ", \
                                                                 ##__VA_ARGS__));            \
  } while (0)

/// For POSIX calls that return -1 and set errno: adds strerror(errno) to the message.
#define ZT_CHECK_ERRNO(expr, ...)                                                                \
  do {                                                                                           \
    if ((expr) < 0) {                                                                            \
      int zt_saved_errno_ = errno;                                                               \
      ::zt::throw_error(__FILE__, __LINE__,                                                      \
                        ::zt::cat(#expr, " failed: ", std::strerror(zt_saved_errno_), " ",       \
                                  ##__VA_ARGS__));                                               \
    }                                                                                            \
  } while (0)

/// Bad user input: throws zt::UsageError with a message meant for the user (no file:line).
#define ZT_USAGE_CHECK(cond, ...)                                      \
  do {                                                                 \
    if (!(cond)) throw ::zt::UsageError(::zt::cat(__VA_ARGS__));       \
  } while (0)
