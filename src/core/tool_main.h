// The shared top of the command-line tools: one line on stderr and exit 2 for bad input
// (UsageError), exit 1 for anything else; never an uncaught exception.
#pragma once

#include <exception>
#include <functional>

#include "core/log.h"

namespace zt {

inline int run_tool(const char* program, const std::function<int()>& body) {
  set_log_program(program);
  try {
    const int code = body();
    check_log_written();
    return code;
  } catch (const UsageError& e) {
    log_line(LogLevel::kError, e.what());
    return 2;
  } catch (const std::exception& e) {
    log_line(LogLevel::kError, e.what());
    return 1;
  }
}

}  // namespace zt
