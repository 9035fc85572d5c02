// Adafactor's scalars that are not element-wise: the step size of step t and, per tensor, the
// scale of its update (the step size over the update's RMS clip) and its weight decay, from the
// tensor's sum(w^2) and sum(u^2) over every rank. The element-wise passes are the backend's
// (OptimizerOps::adafactor_*); the factors' home is zero/adafactor_factors.h.
//
// transformers' Adafactor (HF --optim adafactor):
//   rho = relative_step ? min(warmup_init ? 1e-6 t : 1e-2, 1 / sqrt(t)) : lr
//   lr_t = rho * (scale_parameter ? max(eps2, RMS(w)) : 1)
//   w -= wd lr_t w ; w -= lr_t u / max(1, RMS(u) / clip_threshold)
// torch.optim.Adafactor (DeepSpeed's "Adafactor"):
//   alpha = max(eps2, RMS(w)) min(lr, 1 / sqrt(t))
//   w *= 1 - lr wd ; w -= alpha u / max(1, RMS(u) / d)
#pragma once

#include <cstddef>
#include <cstdint>

#include "config/ds_config.h"

namespace zt {

/// The step size of step t (1-based) under the schedule's lr.
double adafactor_rho(const OptimizerConfig& o, double lr, int64_t t);

struct AdafactorTensorStep {
  float scale = 0;  ///< multiplies u
  float decay = 0;  ///< w -= decay w
};

/// One tensor's scalars from its numel elements' sums (RMS(w) before this step's update).
AdafactorTensorStep adafactor_tensor_step(const OptimizerConfig& o, double rho, double lr, double sum_w2,
                                          double sum_u2, size_t numel);

}  // namespace zt
