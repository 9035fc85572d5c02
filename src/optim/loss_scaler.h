// Loss scaling for fp16, with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py).
// Dynamic (loss_scale = 0): start at 2^initial_scale_power; on overflow skip the step and, once
// `hysteresis` overflows have been absorbed, halve the scale (not below min_loss_scale); after
// loss_scale_window steps without overflow, double it. Static: a fixed scale, and an overflow
// still skips the step. Without fp16 the scale is 1 and nothing overflows.
#pragma once

#include <cstdint>

#include "config/ds_config.h"

namespace zt {

class LossScaler {
 public:
  explicit LossScaler(const Fp16Config& config);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  /// Records the outcome of a step; call once per optimizer step, overflow or not.
  void update(bool overflow);

  struct State {
    double scale;
    int64_t cur_iter, last_overflow_iter;
    int cur_hysteresis;
  };
  State state() const { return {scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_}; }
  void restore(const State& s);

 private:
  bool dynamic_;
  double scale_, min_scale_;
  int64_t window_;
  int delayed_shift_;
  bool consecutive_hysteresis_;
  int64_t cur_iter_ = 0, last_overflow_iter_ = -1;
  int cur_hysteresis_;
};

}  // namespace zt
