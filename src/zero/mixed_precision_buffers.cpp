#include "zero/mixed_precision_buffers.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

namespace {

// The slots each kind needs: weight copies where the parameters are not in the working dtype,
// below stage 3 (stage 3's come gathered); fp32 gradient slots unless stages 0/1 accumulate fp32
// gradients in place (fp32 training, and bf16 with fp32 gradient accumulation, DeepSpeed's
// default at stage 0).
bool needs_weight_slots(const ZeroPlan& plan) { return plan.working_copies() && plan.stage < 3; }
bool needs_grad_slots(const ZeroPlan& plan) { return plan.grad_dtype != DType::kF32 || plan.stage >= 2; }

// The tied unit's slot, then the others'.
std::vector<size_t> slot_sizes(const ParamLayout& layout, int others) {
  std::vector<size_t> sizes{layout.tied_unit() >= 0 ? layout.unit_size(layout.tied_unit()) : 0};
  for (int i = 0; i < others; ++i) sizes.push_back(layout.max_untied_unit_size());
  return sizes;
}

}  // namespace

MixedPrecisionBuffers::Bytes MixedPrecisionBuffers::sizes(const ZeroPlan& plan, const ParamLayout& layout) {
  Bytes b;
  b.params = plan.params_on_nvme ? 0 : plan.params_count * plan.elem();
  b.grads = plan.grads_count * plan.grad_elem();
  auto add_slots = [&](int others, size_t elem) {
    for (size_t n : slot_sizes(layout, others)) {
      if (n == 0) continue;  // an empty DeviceArray allocates nothing
      b.working_arrays.push_back(n * elem);
      b.working += n * elem;
    }
  };
  if (needs_weight_slots(plan)) add_slots(2, plan.working_elem());
  if (needs_grad_slots(plan)) add_slots(1, sizeof(float));
  return b;
}

MixedPrecisionBuffers::MixedPrecisionBuffers(const ZeroPlan& plan, const ParamLayout& layout, Backend& backend,
                                             DataComm& comm)
    : plan_(plan), layout_(layout), backend_(backend), compute_(backend.compute_stream()) {
  if (!plan.params_on_nvme) params_ = DeviceArray<unsigned char>(backend, plan.params_count * plan.elem(), plan.param_pool);
  const size_t grad_bytes = plan.grads_count * plan.grad_elem();
  grads_ = plan.grads_reduced_in_place() ? CommBuffer(comm, backend, grad_bytes, plan.grad_pool)
                                         : CommBuffer(backend, grad_bytes, plan.grad_pool);
  zero_grads();
  auto make_slots = [&](std::vector<Slot>& slots, int others, size_t elem) {
    for (size_t n : slot_sizes(layout, others)) {
      slots.push_back(Slot{-1, DeviceArray<unsigned char>(backend, n * elem)});
    }
  };
  if (needs_weight_slots(plan)) make_slots(weight_slots_, 2, plan.working_elem());
  if (needs_grad_slots(plan)) make_slots(grad_slots_, 1, sizeof(float));
}

void* MixedPrecisionBuffers::working_slot(std::vector<Slot>& slots, int unit, bool& fresh) {
  fresh = false;
  if (unit == layout_.tied_unit()) {
    fresh = slots[0].unit != unit;
    slots[0].unit = unit;
    return slots[0].data.data();
  }
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].unit == unit) return slots[i].data.data();
  }
  // Reuse the slot used least recently: slots[1] is always the newest.
  std::rotate(slots.begin() + 1, slots.end() - 1, slots.end());
  slots[1].unit = unit;
  fresh = true;
  return slots[1].data.data();
}

const void* MixedPrecisionBuffers::working_weights(int unit) {
  const size_t offset = layout_.unit_offset(unit);
  if (weight_slots_.empty()) return param_at(offset);  // already in the working dtype
  bool fresh = false;
  void* slot = working_slot(weight_slots_, unit, fresh);
  if (fresh) {
    backend_.cast_async(param_at(offset), plan_.dtype, slot, plan_.working_dtype, layout_.unit_size(unit), compute_);
  }
  return slot;
}

float* MixedPrecisionBuffers::grad_slot(int unit) {
  if (grad_slots_.empty()) return reinterpret_cast<float*>(grad_at(layout_.unit_offset(unit)));
  bool fresh = false;
  auto* slot = static_cast<float*>(working_slot(grad_slots_, unit, fresh));
  backend_.zero_async(slot, layout_.unit_size(unit) * sizeof(float), compute_);
  return slot;
}

float* MixedPrecisionBuffers::finished_grad_slot(int unit) {
  if (grad_slots_.empty()) return nullptr;
  bool fresh = false;
  auto* slot = static_cast<float*>(working_slot(grad_slots_, unit, fresh));
  ZT_CHECK(!fresh, "the gradient of unit ", unit, " finished without a slot (grads_done without grad_accumulator)");
  return slot;
}

void MixedPrecisionBuffers::invalidate_weights() {
  for (auto& s : weight_slots_) s.unit = -1;
  if (packs_) backend_.ops_bf16().weight_packs(params_.data(), params_.data() + params_.bytes(), WeightPacks::kStale);
}

MixedPrecisionBuffers::~MixedPrecisionBuffers() {
  if (packs_) backend_.ops_bf16().weight_packs(params_.data(), params_.data() + params_.bytes(), WeightPacks::kDrop);
}

bool MixedPrecisionBuffers::keep_weight_packs() {
  if (packs_ || !plan_.weights_packable()) return packs_;
  packs_ = backend_.ops_bf16().weight_packs(params_.data(), params_.data() + params_.bytes(), WeightPacks::kKeep);
  return packs_;
}

void MixedPrecisionBuffers::zero_grads() {
  const size_t n = grads_.bytes() / plan_.grad_elem();
  if (plan_.grads_on_host) {
    backend_.synchronize(compute_);  // nothing reduces into them any more
    host_optimizer_ops().zero(grads_.data(), plan_.grad_dtype, n);
    return;
  }
  backend_.optimizer_ops().zero(grads_.data(), plan_.grad_dtype, n);
}

MixedPrecisionBuffers::Bytes MixedPrecisionBuffers::bytes() const {
  Bytes b;
  b.params = params_.bytes();
  b.grads = grads_.bytes();
  for (const auto* slots : {&weight_slots_, &grad_slots_}) {
    for (const auto& s : *slots) {
      if (s.data.bytes() == 0) continue;
      b.working += s.data.bytes();
      b.working_arrays.push_back(s.data.bytes());
    }
  }
  return b;
}

}  // namespace zt
