// Adam / AdamW with DeepSpeed's semantics: the step counter, bias correction and the choice of
// L2 (adam_w_mode = false) or decoupled weight decay. The arithmetic is the backend's fused
// kernel (OptimizerOps::adam_step); this class owns the hyperparameters and the step count.
#pragma once

#include <cstdint>

#include "backend/optimizer_ops.h"
#include "config/ds_config.h"

namespace zt {

class Adam {
 public:
  explicit Adam(const OptimizerConfig& config) : config_(config) {}

  /// Advances the step counter and returns the kernel arguments for this step, with the lr
  /// (and betas, when a schedule drives them) and the gradient multiplier given.
  AdamStepArgs begin_step(double lr, double beta1, double beta2, double grad_scale);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  int64_t step_ = 0;
};

/// The global-norm clipping coefficient: max_norm / (norm + 1e-6) when that is below 1, else 1
/// (no clipping when max_norm is 0), as torch.nn.utils.clip_grad_norm_ and DeepSpeed compute it.
double clip_coefficient(double grad_norm, double max_norm);

}  // namespace zt
