// The optimizer's update rule with DeepSpeed's semantics: its hyperparameters, its step counter
// (bias correction, Adagrad's lr_decay) and the fp32 state fields it keeps beside the master
// weights. The arithmetic is the backend's fused kernel for the rule (OptimizerOps::step); this
// class turns a step's schedule values into that kernel's arguments.
#pragma once

#include <cstdint>

#include "backend/optimizer_ops.h"
#include "config/ds_config.h"

namespace zt {

/// The update rule an optimizer type steps with (Adam and AdamW share one, adamw_mode tells).
UpdateRule update_rule(OptimizerConfig::Type type);

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config) : config_(config) {}

  /// Advances the step counter and returns the kernel arguments for this step, with the lr
  /// (and betas, when a schedule drives them) and the gradient multiplier given.
  OptimizerStepArgs begin_step(double lr, double beta1, double beta2, double grad_scale);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  int64_t step_ = 0;
};

/// OnebitAdam and OnebitLamb: whether step `step` (1-based) all-reduces the momentum compressed,
/// with local gradients. DeepSpeed's first step only sets up its buffers, and compression starts
/// after the step at which the count reaches freeze_step, and never before step 3.
bool onebit_compressed(const OptimizerConfig& config, int64_t step);

/// ZeroOneAdam's kind of step `step` (1-based), as DeepSpeed's zoadam.py runs it.
enum class ZeroOnePhase {
  kSetUp,           ///< step 1: DeepSpeed only sets up its buffers
  kVariance,        ///< Adam without bias correction on the averaged gradient, exp_avg_sq updated
  kCompressedGrad,  ///< the momentum from the 1-bit all-reduced gradient, exp_avg_sq as it is
  kLocal,           ///< past var_freeze_step: each rank steps on its own gradient (ZeroOnePass::kLocal)
};
ZeroOnePhase zero_one_phase(const OptimizerConfig& config, int64_t step);
/// The first local step: max(3, var_freeze_step + 2).
int64_t zero_one_first_local_step(const OptimizerConfig& config);
/// The variance interval at step `step` (variance steps are its multiples): 1, doubled after
/// every var_update_scaler variance steps.
int64_t zero_one_var_interval(const OptimizerConfig& config, int64_t step);
/// The local-step interval at step `step` (of the local phase): the ranks meet at its
/// multiples. 1, doubled every local_step_scaler local steps up to local_step_clipper.
int64_t zero_one_local_interval(const OptimizerConfig& config, int64_t step);
/// Whether step `step` keeps each rank's gradient its own (DeepSpeed's enable_backward_allreduce
/// false): OnebitAdam's compressed steps, ZeroOneAdam's compressed and local ones.
bool local_gradients(const OptimizerConfig& config, int64_t step);

/// The global-norm clipping coefficient: max_norm / (norm + 1e-6) when that is below 1, else 1
/// (no clipping when max_norm is 0), as torch.nn.utils.clip_grad_norm_ and DeepSpeed compute it.
double clip_coefficient(double grad_norm, double max_norm);

}  // namespace zt
