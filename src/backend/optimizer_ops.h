// Kernels over flat buffers used by the optimizer and the mixed-precision machinery. Gradients and
// parameters may be fp32, bf16 or fp16; master weights and moments are always fp32.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zt {

/// One Adam step's scalars, as DeepSpeed's CPU Adam computes them.
struct AdamStepArgs {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0;
  bool adamw_mode = true;
  /// 1 - beta1^t and 1 - beta2^t (1 when bias correction is off).
  float bias_correction1 = 1, bias_correction2 = 1;
  /// Multiplies every gradient before use: 1/loss_scale x clip coefficient.
  float grad_scale = 1;
};

class OptimizerOps {
 public:
  virtual ~OptimizerOps() = default;

  /// The fused Adam/AdamW step over n elements: reads the gradient in its own dtype, updates the
  /// fp32 master weights and both moments, and writes the parameter in `param_dtype` in the same
  /// pass (param may alias master when both are fp32). No fp32 copy of the gradient is made.
  virtual void adam_step(const AdamStepArgs& args, float* master, float* exp_avg, float* exp_avg_sq,
                         const void* grad, DType grad_dtype, void* param, DType param_dtype, size_t n) = 0;

  /// Adds the sum of squares of n gradient values, in double, to *out (memory of the same kind
  /// as `data`); NaN or inf in the data gives a non-finite result.
  virtual void sum_squares(const void* data, DType dtype, size_t n, double* out) = 0;

  /// acc[i] = round(acc[i] + x[i]) in acc's dtype: gradient accumulation (16-bit or fp32, either side).
  virtual void accumulate_into(void* acc, DType acc_dtype, const void* x, DType x_dtype, size_t n) = 0;

  /// Sets n elements to zero.
  virtual void zero(void* data, DType dtype, size_t n) = 0;
};

}  // namespace zt
