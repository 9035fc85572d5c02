// What every fuzz harness requires of a reader: it accepts the input, or refuses it with a
// zt::UsageError of one line that starts with the name of the file (or throws zt::Error, an
// internal failure the reader reports properly). Anything else is a finding: another exception
// escapes and ends the process through std::terminate, a bad message or a broken invariant of an
// accepted input aborts; a crash or a hang is caught by libFuzzer or fuzz_driver.cpp.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace zt::fuzz {

enum class Outcome { kAccepted, kRefused, kInternalError };

/// What the last checked call did (fuzz_driver.cpp counts it, and holds valid_* seeds to it).
inline Outcome last_outcome = Outcome::kAccepted;
/// Its error message when it was refused, for the driver to say why a valid_* seed was.
inline std::string last_message;

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

/// Runs `read` and checks how it ended; `source` is the file name the reader was given.
template <typename Read>
void check_reader(const std::string& source, Read&& read) {
  // Warnings (dropout ignored, ...) are no finding; keep the output to the findings.
  static const bool quiet = (set_log_level(LogLevel::kError), true);
  (void)quiet;
  last_message.clear();
  try {
    read();
    last_outcome = Outcome::kAccepted;
  } catch (const UsageError& e) {
    const std::string message = e.what();
    last_message = message;
    if (message.rfind(source + ":", 0) != 0) finding("a refusal that does not start with the file name: " + message);
    if (message.find('\n') != std::string::npos) finding("a refusal of more than one line: " + message);
    last_outcome = Outcome::kRefused;
  } catch (const Error& e) {
    last_message = e.what();
    last_outcome = Outcome::kInternalError;
  }
}

}  // namespace zt::fuzz
