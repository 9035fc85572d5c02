// The live progress line on a terminal (one line, rewritten in place), like tqdm in HF Trainer.
// Drawn on stderr when it is a terminal, else on stdout when that is (under mpirun only stdout
// gets a pty); off otherwise or with --disable_tqdm, and log lines then carry the progress.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/timer.h"

namespace zt {

class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, bool enabled);
  ~ProgressLine();
  /// Redraws the line for `step` of the total with the given summary text.
  void update(int64_t step, const std::string& summary);
  /// Clears the line so that a log line can be printed cleanly.
  void clear();
  bool enabled() const { return enabled_; }

 private:
  int64_t total_;
  std::FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  Stopwatch clock_;
};

/// "1m05s", "2h03m", "12s".
std::string format_duration(double seconds);

}  // namespace zt
