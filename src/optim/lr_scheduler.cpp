#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace zt {

LrScheduler::LrScheduler(const SchedulerConfig& config, double base_lr)
    : c_(config), base_lr_(base_lr), warmup_steps_(std::max<int64_t>(2, config.warmup_num_steps)) {}

double LrScheduler::warmup_gamma(int64_t it) const {
  if (c_.warmup_type_log) return std::log(double(it + 1)) / std::log(double(warmup_steps_));
  return double(it) / double(warmup_steps_);
}

// transformers.get_scheduler's lambdas (num_cycles 0.5 for cosine), at scheduler step `step`.
double LrScheduler::trainer_factor(int64_t step) const {
  using H = SchedulerConfig::TrainerType;
  const double s = double(step), warmup = double(c_.warmup_num_steps), total = double(c_.total_num_steps);
  if (c_.trainer_type == H::kConstant) return 1.0;
  if (step < c_.warmup_num_steps) return s / std::max(1.0, warmup);
  switch (c_.trainer_type) {
    case H::kLinear: return std::max(0.0, (total - s) / std::max(1.0, total - warmup));
    case H::kCosine: {
      double progress = (s - warmup) / std::max(1.0, total - warmup);
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
    }
    default: return 1.0;
  }
}

// OneCycle's position in the cycle, 0 at cycle_min_lr and 1 at cycle_max_lr. (DeepSpeed's
// OneCycle stores cycle_*_stair_count but its _get_scale_factor never reads them: no stairs.)
double LrScheduler::one_cycle_scale(int64_t it) const {
  const double first = double(c_.cycle_first_step_size);
  const double second = c_.cycle_second_step_size ? double(*c_.cycle_second_step_size) : first;
  const double total = first + second, step_ratio = first / total;
  const double batch_iteration = double(it + 1);
  const double x = 1.0 + batch_iteration / total - std::floor(1.0 + batch_iteration / total);
  return x <= step_ratio ? x / step_ratio : (x - 1.0) / (step_ratio - 1.0);
}

ScheduledValues LrScheduler::values_at(int64_t it) const {
  using T = SchedulerConfig::Type;
  ScheduledValues v;
  switch (c_.type) {
    case T::kTrainer:
      // HF's LambdaLR is stepped after every optimizer step from step 0, so the optimizer step
      // that follows last_batch_iteration = it runs at factor(it + 1).
      v.lr = base_lr_ * trainer_factor(it + 1);
      break;
    case T::kWarmupLR:
    case T::kWarmupDecayLR: {
      const double min_lr = c_.warmup_min_lr, max_lr = c_.warmup_max_lr.value_or(base_lr_);
      if (it < 0) {  // DeepSpeed initialises the optimizer with min_lr
        v.lr = min_lr;
        break;
      }
      double gamma = 1.0;
      if (it < warmup_steps_) {
        gamma = warmup_gamma(it);
      } else if (c_.type == T::kWarmupDecayLR) {
        gamma = std::max(0.0, double(c_.total_num_steps - it) /
                                  std::max(1.0, double(c_.total_num_steps - warmup_steps_)));
      }
      v.lr = min_lr + (max_lr - min_lr) * gamma;
      break;
    }
    case T::kWarmupCosineLR: {
      if (it < 0) {  // get_lr() returns [0.0] before the first step
        v.lr = 0.0;
        break;
      }
      double ratio;
      if (it < warmup_steps_) {
        ratio = c_.warmup_min_ratio + warmup_gamma(it) * (1.0 - c_.warmup_min_ratio);
      } else {
        // DeepSpeed clamps the progress to 1, so the lr stays at cos_min_ratio after
        // total_num_steps, and its max(1, ...) covers total_num_steps <= warmup.
        const double real_last_step = double(it - warmup_steps_ + 1);
        const double real_total_steps = double(std::max<int64_t>(1, c_.total_num_steps - warmup_steps_));
        const double progress = std::min(1.0, real_last_step / real_total_steps);
        const double cosine = (1.0 + std::cos(M_PI * progress)) / 2.0;
        ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * cosine);
      }
      v.lr = base_lr_ * ratio;
      break;
    }
    case T::kOneCycle: {
      const double first = double(c_.cycle_first_step_size);
      const double total = first + (c_.cycle_second_step_size ? double(*c_.cycle_second_step_size) : first);
      if (it < 0) {  // construction: lr = cycle_min_lr, betas = (cycle_min_mom, 0.99)
        v.lr = c_.cycle_min_lr;
        if (c_.cycle_momentum) {
          v.beta1 = c_.cycle_min_mom;
          v.beta2 = 0.99;
        }
        break;
      }
      if (double(it) < total) {
        const double scale = one_cycle_scale(it);
        v.lr = c_.cycle_min_lr + (c_.cycle_max_lr - c_.cycle_min_lr) * scale;
        if (c_.cycle_momentum) {
          v.beta1 = c_.cycle_max_mom - (c_.cycle_max_mom - c_.cycle_min_mom) * scale;
          v.beta2 = 0.99;
        }
      } else {
        double decay_iteration = double(it) - total + 1.0;
        bool skip_decay = c_.decay_step_size == 0;
        if (skip_decay || c_.decay_lr_rate == 0.0) {
          v.lr = c_.cycle_min_lr;
        } else {
          double interval = decay_iteration / double(c_.decay_step_size);
          v.lr = c_.cycle_min_lr / (1.0 + c_.decay_lr_rate * interval);
        }
        if (c_.cycle_momentum) {
          if (skip_decay || c_.decay_mom_rate == 0.0) {
            v.beta1 = c_.cycle_max_mom;
          } else {
            double interval = decay_iteration / double(c_.decay_step_size);
            v.beta1 = c_.cycle_max_mom * (1.0 + c_.decay_mom_rate * interval);
          }
          v.beta2 = 0.99;
        }
      }
      break;
    }
    case T::kLRRangeTest: {
      if (it < 0) {
        v.lr = c_.lr_range_test_min_lr;
        break;
      }
      double interval = double(it + 1) / double(c_.lr_range_test_step_size);
      if (c_.lr_range_test_staircase) interval = std::floor(interval);
      v.lr = c_.lr_range_test_min_lr * (1.0 + c_.lr_range_test_step_rate * interval);
      break;
    }
  }
  return v;
}

}  // namespace zt
