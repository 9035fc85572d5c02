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
/// Throws zt::Error naming stderr's file if a log line could not be written (a full disk), so
/// that a program can end non-zero although its log cannot say why.
void check_log_written();

/// Whether stderr is a terminal, so that a live status line can be redrawn in place. Under
/// mpirun it is not: orted gives a rank's stdout a pty whether or not mpirun's own output is a
/// terminal, so a rank cannot tell, and a line drawn there would end up glued to log lines in
/// a redirected log.
bool log_is_terminal();
/// Sets the live status line drawn below the log (the progress line); "" removes it. Every
/// log_line clears it, prints, and draws it again, so the two never share a line. Only where
/// log_is_terminal().
void set_status_line(const std::string& text);

template <typename... Args>
void log_info(const Args&... args) { log_line(LogLevel::kInfo, cat(args...)); }
template <typename... Args>
void log_warn(const Args&... args) { log_line(LogLevel::kWarn, cat(args...)); }
template <typename... Args>
void log_debug(const Args&... args) { log_line(LogLevel::kDebug, cat(args...)); }

}  // namespace zt
