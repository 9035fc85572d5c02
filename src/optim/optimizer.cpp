#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "optim/adafactor.h"

namespace zt {

UpdateRule update_rule(OptimizerConfig::Type type) {
  switch (type) {
    case OptimizerConfig::Type::kLion: return UpdateRule::kLion;
    case OptimizerConfig::Type::kAdagrad: return UpdateRule::kAdagrad;
    case OptimizerConfig::Type::kLamb: return UpdateRule::kLamb;
    case OptimizerConfig::Type::kMuon: return UpdateRule::kMuon;
    case OptimizerConfig::Type::kAdafactor: return UpdateRule::kAdafactor;
    case OptimizerConfig::Type::kOneBitAdam: return UpdateRule::kOneBitAdam;
    case OptimizerConfig::Type::kZeroOneAdam: return UpdateRule::kZeroOneAdam;
    case OptimizerConfig::Type::kOneBitLamb: return UpdateRule::kOneBitLamb;
    case OptimizerConfig::Type::kAdam:
    case OptimizerConfig::Type::kAdamW: break;
  }
  return UpdateRule::kAdam;
}

OptimizerStepArgs Optimizer::begin_step(double lr, double beta1, double beta2, double grad_scale) {
  ++step_;
  OptimizerStepArgs a;
  a.rule = update_rule(config_.type);
  a.lr = float(lr);
  a.beta1 = float(beta1);
  a.beta2 = float(beta2);
  a.eps = float(config_.eps);
  a.weight_decay = float(config_.weight_decay);
  a.adamw_mode = config_.adam_w_mode;
  a.eps_inside_sqrt = config_.eps_inside_sqrt;
  if (a.rule == UpdateRule::kMuon) {
    // Both groups follow the schedule in proportion; the AdamW group is always bias-corrected
    // and decoupled (MuonWithAuxAdam's adam_update).
    const double ratio = config_.lr > 0 ? lr / config_.lr : 0.0;
    a.lr = float(config_.adam_lr * ratio);
    a.muon_lr = float(config_.muon_lr * ratio);
    a.momentum = float(config_.momentum);
    a.adamw_mode = true;
  }
  if ((a.rule == UpdateRule::kAdam || a.rule == UpdateRule::kLamb || a.rule == UpdateRule::kMuon) &&
      (config_.bias_correction || a.rule == UpdateRule::kMuon)) {
    a.bias_correction1 = float(1.0 - std::pow(beta1, double(step_)));
    a.bias_correction2 = float(1.0 - std::pow(beta2, double(step_)));
  }
  if (a.rule == UpdateRule::kAdafactor) {
    // beta2_t = 1 - t^decay_rate; transformers adds eps1 to g^2, torch clamps at it. lr is the
    // step size rho (optim/adafactor.h); each tensor's own scale comes with the apply pass.
    a.beta2 = float(1.0 - std::pow(double(step_), config_.decay_rate));
    a.beta1 = float(config_.adafactor_beta1.value_or(0.0));
    a.eps = config_.adafactor_torch ? 0.0f : float(config_.adafactor_eps1);
    a.eps_floor = config_.adafactor_torch ? float(config_.adafactor_eps1) : 0.0f;
    a.lr = float(adafactor_rho(config_, lr, step_));
  }
  // OnebitAdam and ZeroOneAdam: decay is always decoupled, w -= lr (m / (sqrt(v) + eps) + wd w),
  // and no step is bias-corrected (the config's bias_correction is false).
  if (a.rule == UpdateRule::kOneBitAdam || a.rule == UpdateRule::kZeroOneAdam) a.adamw_mode = true;
  // OnebitLamb: Lamb's u = m / (sqrt(v) + eps) + wd w, never bias-corrected, eps never inside
  // the root (it takes bias_correction and eps_inside_sqrt and reads neither).
  if (a.rule == UpdateRule::kOneBitLamb) a.eps_inside_sqrt = false;
  // torch.optim.Adagrad's decayed rate: lr / (1 + (t - 1) lr_decay).
  if (a.rule == UpdateRule::kAdagrad) a.lr = float(lr / (1.0 + double(step_ - 1) * config_.lr_decay));
  a.grad_scale = float(grad_scale);
  return a;
}

bool onebit_compressed(const OptimizerConfig& config, int64_t step) {
  // step - 1 >= freeze_step, written so that no freeze_step overflows.
  // OnebitLamb switches where OnebitAdam does (its lamb_freeze_key after the step whose count
  // reaches freeze_step, its first step returning before that test).
  const bool freezes =
      config.type == OptimizerConfig::Type::kOneBitAdam || config.type == OptimizerConfig::Type::kOneBitLamb;
  return freezes && step >= 3 && step - 1 >= config.freeze_step;
}

int64_t zero_one_first_local_step(const OptimizerConfig& config) {
  // DeepSpeed freezes the variance after the step whose count passes var_freeze_step (its
  // first step returns before that test): max(3, var_freeze_step + 2), unoverflowed.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return config.var_freeze_step > kMax - 2 ? kMax : std::max<int64_t>(3, config.var_freeze_step + 2);
}

ZeroOnePhase zero_one_phase(const OptimizerConfig& config, int64_t step) {
  if (step <= 1) return ZeroOnePhase::kSetUp;
  if (step >= zero_one_first_local_step(config)) return ZeroOnePhase::kLocal;
  return step % zero_one_var_interval(config, step) == 0 ? ZeroOnePhase::kVariance : ZeroOnePhase::kCompressedGrad;
}

int64_t zero_one_var_interval(const OptimizerConfig& config, int64_t step) {
  // DeepSpeed counts the variance steps (step % interval == 0, from step 2) and doubles the
  // interval after every var_update_scaler of them: level by level, each level's steps are the
  // next var_update_scaler multiples of its interval.
  int64_t interval = 1, last = 1;
  constexpr int64_t kLimit = int64_t(1) << 61;
  while (interval < kLimit) {
    const int64_t first = (last / interval + 1) * interval, scaler = config.var_update_scaler;
    if (step < first) return interval;
    // Whether step <= the level's last variance step, first + (scaler - 1) interval, unoverflowed.
    const int64_t k = (step - first) / interval, r = (step - first) % interval;
    if (k < scaler - 1 || (k == scaler - 1 && r == 0)) return interval;
    last = first + (scaler - 1) * interval;
    interval *= 2;
  }
  return interval;
}

int64_t zero_one_local_interval(const OptimizerConfig& config, int64_t step) {
  // The local_step_counter counts the local steps before this one; the interval doubles, up
  // to local_step_clipper, each time it reaches local_step_scaler.
  const int64_t first_local = zero_one_first_local_step(config);
  const int64_t doublings = step > first_local ? (step - first_local) / config.local_step_scaler : 0;
  int64_t interval = 1;
  for (int64_t k = 0; k < doublings && interval < config.local_step_clipper; ++k) {
    interval = std::min(config.local_step_clipper, interval * 2);
  }
  return interval;
}

bool local_gradients(const OptimizerConfig& config, int64_t step) {
  if (config.type == OptimizerConfig::Type::kZeroOneAdam) {
    const ZeroOnePhase phase = zero_one_phase(config, step);
    return phase == ZeroOnePhase::kCompressedGrad || phase == ZeroOnePhase::kLocal;
  }
  return onebit_compressed(config, step);
}

double clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  double coef = max_norm / (grad_norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace zt
