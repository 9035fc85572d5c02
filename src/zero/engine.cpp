#include "zero/engine.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace zt {

ZeroEngine::ZeroEngine(const Gpt2Layout& layout, Backend& backend, const DsConfig& config)
    : layout_(layout), backend_(backend), opt_ops_(backend.optimizer_ops()), config_(config),
      param_dtype_(config.param_dtype()), n_(layout.flat_size()), adam_(config.optimizer),
      scheduler_(config.scheduler, config.optimizer.lr), scaler_(config.fp16) {
  ZT_CHECK(config.zero.stage == 0, "this build implements ZeRO stage 0 only");
  const size_t elem = dtype_size(param_dtype_);
  params_ = DeviceArray<unsigned char>(backend, n_ * elem);
  grads_ = DeviceArray<unsigned char>(backend, n_ * elem);
  if (param_dtype_ != DType::kF32) master_ = DeviceArray<float>(backend, n_);
  exp_avg_ = DeviceArray<float>(backend, n_);
  exp_avg_sq_ = DeviceArray<float>(backend, n_);
  opt_ops_.zero(grads_.data(), param_dtype_, n_);
  opt_ops_.zero(exp_avg_.data(), DType::kF32, n_);
  opt_ops_.zero(exp_avg_sq_.data(), DType::kF32, n_);
  if (param_dtype_ != DType::kF32) {
    // One slot for the embedding unit, two for the rest (the current block and the next).
    size_t other = 0;
    for (int u = 1; u < layout.num_units(); ++u) other = std::max(other, layout.unit_size(u));
    weight_slots_.resize(3);
    weight_slots_[0].data = DeviceArray<float>(backend, layout.unit_size(0));
    weight_slots_[1].data = DeviceArray<float>(backend, other);
    weight_slots_[2].data = DeviceArray<float>(backend, other);
    grad_slots_.resize(2);
    grad_slots_[0].data = DeviceArray<float>(backend, layout.unit_size(0));
    grad_slots_[1].data = DeviceArray<float>(backend, other);
  }
}

void ZeroEngine::init_params(uint64_t seed) {
  float* master = param_dtype_ == DType::kF32 ? reinterpret_cast<float*>(params_.data()) : master_.data();
  init_gpt2_params(layout_, seed, master, 0, n_);
  if (param_dtype_ != DType::kF32) convert(master, DType::kF32, params_.data(), param_dtype_, n_);
}

const float* ZeroEngine::master_weights() const {
  return param_dtype_ == DType::kF32 ? reinterpret_cast<const float*>(params_.data()) : master_.data();
}

double ZeroEngine::backward_scale() const {
  return scaler_.scale() / double(config_.gradient_accumulation_steps);
}

float* ZeroEngine::working_slot(std::vector<Slot>& slots, int unit, bool& fresh) {
  fresh = false;
  if (unit == layout_.embedding_unit()) {
    fresh = slots[0].unit != unit;
    slots[0].unit = unit;
    return slots[0].data.data();
  }
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].unit == unit) return slots[i].data.data();
  }
  // Replace the slot not used most recently: slot order is rotated so slots[1] is the newest.
  std::rotate(slots.begin() + 1, slots.end() - 1, slots.end());
  slots[1].unit = unit;
  fresh = true;
  return slots[1].data.data();
}

const float* ZeroEngine::acquire_weights(int unit) {
  const size_t offset = layout_.unit_offset(unit);
  if (param_dtype_ == DType::kF32) return reinterpret_cast<const float*>(params_.data()) + offset;
  bool fresh = false;
  float* slot = working_slot(weight_slots_, unit, fresh);
  if (fresh) convert(param_ptr(offset), param_dtype_, slot, DType::kF32, layout_.unit_size(unit));
  return slot;
}

void ZeroEngine::release_weights(int /*unit*/) {
  // Stage 0 keeps every parameter resident: the working slot stays valid until it is reused.
}

float* ZeroEngine::grad_accumulator(int unit) {
  const size_t offset = layout_.unit_offset(unit);
  if (param_dtype_ == DType::kF32) return reinterpret_cast<float*>(grads_.data()) + offset;
  bool fresh = false;
  float* slot = working_slot(grad_slots_, unit, fresh);
  // The embedding slot is asked for once per backward (at the lm_head); always start from zero.
  std::memset(slot, 0, layout_.unit_size(unit) * sizeof(float));
  return slot;
}

void ZeroEngine::grads_done(int unit) {
  if (param_dtype_ == DType::kF32) return;
  const size_t offset = layout_.unit_offset(unit);
  bool fresh = false;
  float* slot = working_slot(grad_slots_, unit, fresh);
  ZT_CHECK(!fresh, "grads_done(", unit, ") without grad_accumulator");
  opt_ops_.accumulate_into(grad_ptr(offset), param_dtype_, slot, layout_.unit_size(unit));
}

StepOutcome ZeroEngine::step() {
  StepOutcome out;
  out.loss_scale = scaler_.scale();
  const double sum_sq = opt_ops_.sum_squares(grads_.data(), param_dtype_, n_);
  const bool overflow = !std::isfinite(sum_sq);
  out.grad_norm = std::sqrt(sum_sq) / out.loss_scale;
  ScheduledValues sched = scheduler_.current();
  out.lr = sched.lr;
  if (overflow && config_.fp16.enabled) {
    // DeepSpeed's fp16 optimizer: skip the update, lower the scale, keep the schedule where it is.
    out.skipped = true;
    scaler_.update(true);
    opt_ops_.zero(grads_.data(), param_dtype_, n_);
    return out;
  }
  ZT_CHECK(!overflow, "the gradient norm is not finite (", sum_sq, ") in ", dtype_name(param_dtype_),
           " training: the loss diverged; lower the learning rate or enable gradient clipping");
  const double clip = clip_coefficient(out.grad_norm, config_.gradient_clipping);
  const double beta1 = sched.beta1.value_or(config_.optimizer.beta1);
  const double beta2 = sched.beta2.value_or(config_.optimizer.beta2);
  AdamStepArgs args = adam_.begin_step(sched.lr, beta1, beta2, clip / out.loss_scale);
  float* master = param_dtype_ == DType::kF32 ? reinterpret_cast<float*>(params_.data()) : master_.data();
  opt_ops_.adam_step(args, master, exp_avg_.data(), exp_avg_sq_.data(), grads_.data(), param_dtype_,
                     params_.data(), param_dtype_, n_);
  opt_ops_.zero(grads_.data(), param_dtype_, n_);
  // The weights changed: cached fp32 working copies are stale.
  for (auto& s : weight_slots_) s.unit = -1;
  scaler_.update(false);
  scheduler_.step();
  return out;
}

ModelStateBytes ZeroEngine::model_state_bytes() const {
  ModelStateBytes b;
  b.params = params_.bytes();
  b.grads = grads_.bytes();
  b.master = master_.bytes();
  b.exp_avg = exp_avg_.bytes();
  b.exp_avg_sq = exp_avg_sq_.bytes();
  return b;
}

size_t ZeroEngine::buffer_bytes() const {
  size_t total = 0;
  for (const auto& s : weight_slots_) total += s.data.bytes();
  for (const auto& s : grad_slots_) total += s.data.bytes();
  return total;
}

}  // namespace zt
