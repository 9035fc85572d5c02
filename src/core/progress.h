// The live progress line on a terminal (one line, redrawn in place), like tqdm in HF Trainer.
// Drawn on stderr below the log (core/log's status line), only when stderr is a terminal: under
// mpirun it is not (see log_is_terminal), and log lines every steps_per_print carry the progress.
// Off with --disable_tqdm.
#pragma once

#include <cstdint>
#include <string>

#include "core/timer.h"

namespace zt {

class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, bool enabled);
  ~ProgressLine();
  /// Redraws the line for `step` of the total with the given summary text.
  void update(int64_t step, const std::string& summary);
  /// Removes the line (log lines need not: they are printed above it).
  void clear();
  bool enabled() const { return enabled_; }

 private:
  int64_t total_;
  bool enabled_;
  Stopwatch clock_;
};

/// "1m05s", "2h03m", "12s".
std::string format_duration(double seconds);

}  // namespace zt
