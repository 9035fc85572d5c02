// 1-bit Lamb's per-tensor scalars (DeepSpeed 0.19.6's OnebitLamb, onebit/lamb.py), kept on the
// host: the average of each tensor's trust ratio over the warm-up, frozen with exp_avg_sq, and
// after it the factor that follows the variance of the reconstructed gradients, and the scaling
// coefficient that evens the tensors' momenta before their one compressed all-reduce. The
// element-wise passes are the backend's (OptimizerOps::lamb_*, onebit_lamb_*); these turn their
// per-tensor sums into the next pass's scalars.
#pragma once

#include <cstddef>
#include <vector>

#include "config/ds_config.h"

namespace zt {

struct OneBitLambTensor {
  double coeff_freeze = 0;  ///< lamb_coeff_freeze: the warm-up's trust ratios, averaged (coeff_beta)
  double last_factor = 1;   ///< the factor of the previous compressed step
  double scaling = 0;       ///< scaling_coeff; 0 until the first compressed step sets it
};

/// Lamb's trust ratio from a tensor's sum(w^2) and sum(u^2): ||w|| / ||u|| clamped to [min_coeff,
/// max_coeff], 1 when either norm is 0 (FusedLamb's and OnebitLamb's warm-up alike).
double lamb_trust_ratio(const OptimizerConfig& config, double weight_sum_sq, double update_sum_sq);

/// A warm-up step's trust ratio folded into the average: DeepSpeed skips a ratio of exactly 1
/// (which is also what a zero norm gives).
void onebit_lamb_observe(const OptimizerConfig& config, double trust_ratio, OneBitLambTensor& tensor);

/// The scaling coefficients where compression starts, from each tensor's sum(exp_avg^2) and
/// element count: the tensors' mean RMS over the tensor's own. A tensor whose momentum is all
/// zero gets 1 (DeepSpeed divides by its zero RMS: a ZeroDivisionError that ends the run).
void onebit_lamb_set_scaling(const std::vector<double>& exp_avg_sum_sq, const std::vector<size_t>& counts,
                             std::vector<OneBitLambTensor>& tensors);

/// A compressed step's coefficient of one tensor, from onebit_lamb_stats' sum(update^2),
/// sum(update_prelim^2) and max(denom / denom_real): the factor, mixed by the prelim's share of
/// the update where there is weight decay, clamped to [factor_min, factor_max] and to within
/// factor_threshold of the last one (which it becomes), times the frozen average.
double onebit_lamb_coefficient(const OptimizerConfig& config, double update_sum_sq, double prelim_sum_sq,
                               double worst_ratio, OneBitLambTensor& tensor);

}  // namespace zt
