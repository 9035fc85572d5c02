// The ZeRO engine: owns the model states (16-bit or fp32 parameters and gradients, fp32 master
// weights and Adam moments) in flat buffers, serves the model's ParamSource hooks, and runs the
// optimizer step with loss scaling, clipping and the LR schedule.
//
// This build runs stage 0 on one rank; the flat layout, the hooks and the accounting are the
// ones the partitioned stages use.
//
// Mixed precision: parameters and gradients live in the training dtype (bf16/fp16) and the
// model computes in fp32, so acquire_weights() converts a unit into an fp32 working slot and
// grads_done() rounds the unit's fp32 gradients into the 16-bit accumulator. In fp32 the hooks
// hand out pointers into the flat buffers and nothing is copied.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"
#include "model/gpt2_layout.h"
#include "model/param_source.h"
#include "optim/adam.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"

namespace zt {

/// Model-state bytes per rank, by kind (metrics.jsonl's `model_state_bytes`).
struct ModelStateBytes {
  size_t params = 0, grads = 0, master = 0, exp_avg = 0, exp_avg_sq = 0;
  size_t total() const { return params + grads + master + exp_avg + exp_avg_sq; }
};

/// What one optimizer step did.
struct StepOutcome {
  double grad_norm = 0;   ///< global L2 norm of the unscaled gradient, before clipping
  double lr = 0;
  double loss_scale = 1;  ///< the scale the step's gradients were computed with
  bool skipped = false;   ///< fp16 overflow: no update was applied
};

class ZeroEngine final : public ParamSource<float> {
 public:
  ZeroEngine(const Gpt2Layout& layout, Backend& backend, const DsConfig& config);

  /// GPT-2 initialisation from `seed` (see init_gpt2_params).
  void init_params(uint64_t seed);

  /// The factor backward must multiply d(loss) by: loss_scale / gradient_accumulation_steps.
  double backward_scale() const;
  /// Unscale, check overflow, clip, step Adam, zero the gradients, advance the schedule.
  StepOutcome step();

  ModelStateBytes model_state_bytes() const;
  /// Working-copy and gradient-staging buffers (metrics.jsonl's `buffer_bytes`).
  size_t buffer_bytes() const;
  DType param_dtype() const { return param_dtype_; }
  const Gpt2Layout& layout() const { return layout_; }
  /// The fp32 master weights (the parameters themselves in fp32 training).
  const float* master_weights() const;

  // ParamSource<float>
  const float* acquire_weights(int unit) override;
  void release_weights(int unit) override;
  float* grad_accumulator(int unit) override;
  void grads_done(int unit) override;

 private:
  struct Slot {
    int unit = -1;
    DeviceArray<float> data;
  };
  float* working_slot(std::vector<Slot>& slots, int unit, bool& fresh);
  void* param_ptr(size_t element) { return params_.data() + element * dtype_size(param_dtype_); }
  void* grad_ptr(size_t element) { return grads_.data() + element * dtype_size(param_dtype_); }

  const Gpt2Layout& layout_;
  Backend& backend_;
  OptimizerOps& opt_ops_;
  DsConfig config_;
  DType param_dtype_;
  size_t n_;  // flat elements

  DeviceArray<unsigned char> params_, grads_;
  DeviceArray<float> master_, exp_avg_, exp_avg_sq_;  // master_ empty in fp32 (params_ is the master)
  // 16-bit training only: fp32 working copies of units' weights and of units' gradients. The
  // embedding unit has its own slot because the tied lm_head uses it at both ends of the model.
  std::vector<Slot> weight_slots_, grad_slots_;

  Adam adam_;
  LrScheduler scheduler_;
  LossScaler scaler_;
};

}  // namespace zt
