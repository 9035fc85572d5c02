#include "optim/optimizer.h"

#include <cmath>

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
  // OnebitAdam: decay is always decoupled, w -= lr (m / (sqrt(v) + eps) + wd w), and no step is
  // bias-corrected (the config's bias_correction is false).
  if (a.rule == UpdateRule::kOneBitAdam) a.adamw_mode = true;
  // torch.optim.Adagrad's decayed rate: lr / (1 + (t - 1) lr_decay).
  if (a.rule == UpdateRule::kAdagrad) a.lr = float(lr / (1.0 + double(step_ - 1) * config_.lr_decay));
  a.grad_scale = float(grad_scale);
  return a;
}

bool onebit_compressed(const OptimizerConfig& config, int64_t step) {
  // step - 1 >= freeze_step, written so that no freeze_step overflows.
  return config.type == OptimizerConfig::Type::kOneBitAdam && step >= 3 && step - 1 >= config.freeze_step;
}

double clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  double coef = max_norm / (grad_norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace zt
