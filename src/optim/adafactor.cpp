#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>

namespace zt {

double adafactor_rho(const OptimizerConfig& o, double lr, int64_t t) {
  const double inv_sqrt = 1.0 / std::sqrt(double(t));
  if (o.adafactor_torch) return std::min(lr, inv_sqrt);
  if (!o.relative_step) return lr;
  return std::min(o.warmup_init ? 1e-6 * double(t) : 1e-2, inv_sqrt);
}

AdafactorTensorStep adafactor_tensor_step(const OptimizerConfig& o, double rho, double lr, double sum_w2,
                                          double sum_u2, size_t numel) {
  const double n = double(numel);
  const double rms_w = std::sqrt(sum_w2 / n), rms_u = std::sqrt(sum_u2 / n);
  const double step = o.scale_parameter ? rho * std::max(o.adafactor_eps2, rms_w) : rho;
  const double clip = std::max(1.0, rms_u / o.clip_threshold);
  AdafactorTensorStep s;
  s.scale = float(step / clip);
  // transformers decays by the scaled step, torch by the schedule's lr.
  s.decay = float(o.weight_decay * (o.adafactor_torch ? lr : step));
  return s;
}

}  // namespace zt
