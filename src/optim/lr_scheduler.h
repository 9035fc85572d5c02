// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py), same formulas and the
// same step semantics: the scheduler starts at last_batch_iteration = -1, the first optimizer
// step uses the value set at construction, and step() advances after every optimizer step that
// was not skipped for an fp16 overflow.
#pragma once

#include <cstdint>
#include <optional>

#include "config/ds_config.h"

namespace zt {

/// What a schedule sets for the next optimizer step. OneCycle with cycle_momentum also drives
/// Adam's betas (and, as in DeepSpeed, sets beta2 to 0.99).
struct ScheduledValues {
  double lr = 0;
  std::optional<double> beta1, beta2;
};

class LrScheduler {
 public:
  /// `base_lr` is the optimizer's lr (the cosine schedule scales it; WarmupLR's default max).
  LrScheduler(const SchedulerConfig& config, double base_lr);

  /// The values for the next optimizer step.
  ScheduledValues current() const { return values_at(last_batch_iteration_); }
  /// Advances after an applied optimizer step.
  void step() { ++last_batch_iteration_; }

  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  void set_last_batch_iteration(int64_t it) { last_batch_iteration_ = it; }

  /// The values when last_batch_iteration == it (it = -1: the values set at construction).
  ScheduledValues values_at(int64_t it) const;

 private:
  double warmup_gamma(int64_t it) const;
  double trainer_factor(int64_t step) const;
  double one_cycle_scale(int64_t it) const;
  SchedulerConfig c_;
  double base_lr_;
  int64_t warmup_steps_;  // max(2, warmup_num_steps), as DeepSpeed
  int64_t last_batch_iteration_ = -1;
};

}  // namespace zt
