#include "optim/onebit_lamb.h"

#include <algorithm>
#include <cmath>

namespace zt {

double lamb_trust_ratio(const OptimizerConfig& config, double weight_sum_sq, double update_sum_sq) {
  const double w = std::sqrt(weight_sum_sq), u = std::sqrt(update_sum_sq);
  if (w == 0 || u == 0) return 1.0;
  return std::clamp(w / u, config.min_coeff, config.max_coeff);
}

void onebit_lamb_observe(const OptimizerConfig& config, double trust_ratio, OneBitLambTensor& tensor) {
  if (trust_ratio == 1.0) return;
  tensor.coeff_freeze = config.coeff_beta * tensor.coeff_freeze + (1 - config.coeff_beta) * trust_ratio;
}

void onebit_lamb_set_scaling(const std::vector<double>& exp_avg_sum_sq, const std::vector<size_t>& counts,
                             std::vector<OneBitLambTensor>& tensors) {
  std::vector<double> rms(tensors.size());
  double united = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    rms[t] = counts[t] > 0 ? std::sqrt(exp_avg_sum_sq[t]) / std::sqrt(double(counts[t])) : 0.0;
    united += rms[t];
  }
  united /= double(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) tensors[t].scaling = rms[t] > 0 ? united / rms[t] : 1.0;
}

double onebit_lamb_coefficient(const OptimizerConfig& config, double update_sum_sq, double prelim_sum_sq,
                               double worst_ratio, OneBitLambTensor& tensor) {
  double factor = worst_ratio;
  if (config.weight_decay > 0.0) {
    // min(1, ||prelim|| / ||update||), which is 1 where the division gives NaN (Python's min
    // keeps its first argument then).
    const double share = std::sqrt(prelim_sum_sq) / std::sqrt(update_sum_sq);
    const double ratio = share < 1.0 ? share : 1.0;
    factor = factor * ratio + (1.0 - ratio);
  }
  // DeepSpeed's four comparisons in its order: each bound replaces the factor when crossed.
  if (factor > config.factor_max) factor = config.factor_max;
  if (factor < config.factor_min) factor = config.factor_min;
  if (factor > tensor.last_factor * (1.0 + config.factor_threshold)) {
    factor = tensor.last_factor * (1.0 + config.factor_threshold);
  }
  if (factor < tensor.last_factor * (1.0 - config.factor_threshold)) {
    factor = tensor.last_factor * (1.0 - config.factor_threshold);
  }
  tensor.last_factor = factor;
  return tensor.coeff_freeze * factor;
}

}  // namespace zt
