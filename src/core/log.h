// Logging: one line per message on stderr, prefixed with the program name. Only rank 0 prints
// info messages (set_log_rank), as llm.c's printf0 does; warnings and errors print on any rank.
#pragma once

#include <string>

#include "core/error.h"

namespace zt {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

/// Sets the program name shown in front of every line ("zerotrain", "zero_to_fp32", ...).
void set_log_program(const std::string& name);
/// Sets this process's rank; info and debug lines print on rank 0 only.
void set_log_rank(int rank);
/// Sets the lowest level printed (ZT_LOG_LEVEL=debug|info|warn|error also sets it).
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(const Args&... args) { log_line(LogLevel::kInfo, cat(args...)); }
template <typename... Args>
void log_warn(const Args&... args) { log_line(LogLevel::kWarn, cat(args...)); }
template <typename... Args>
void log_debug(const Args&... args) { log_line(LogLevel::kDebug, cat(args...)); }

}  // namespace zt
