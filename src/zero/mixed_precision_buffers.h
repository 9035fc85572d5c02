// The mixed-precision buffers of the ZeRO engine: the flat parameters in the training dtype
// (DeepSpeed's bit16 groups), the flat gradients in the accumulation dtype (ZeroPlan::grad_dtype),
// and the working copies the model computes with.
//
// The model reads its weights in the plan's working dtype (its activation dtype: fp32, or bf16
// in a bf16 model) and writes fp32 gradients. Where the parameters are in another dtype,
// working_weights() hands out a copy of a unit cast to the working dtype (stages 0-2; stage 3's
// come from the parameter coordinator); where they are the same (fp32 training, or bf16 training
// with bf16 activations) the model reads the parameters themselves. A unit's gradient comes back
// in an fp32 slot that is rounded into the 16-bit accumulator (stages 0, 1) or handed to the
// gradient reducer (stages 2, 3). Where stages 0/1 accumulate in fp32 (fp32 training; bf16 with
// fp32 accumulation, DeepSpeed's BF16_Optimizer) the gradient slot is the flat buffer itself:
// nothing is copied. Slots: one for the tied unit (used at both ends of a step), two for the
// others (the one in use and the next).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/comm_buffer.h"
#include "comm/data_comm.h"
#include "model/param_layout.h"
#include "zero/zero_plan.h"

namespace zt {

class MixedPrecisionBuffers {
 public:
  struct Bytes {
    size_t params = 0;   ///< the parameter buffer (0 when ParamSwapper holds the partition)
    size_t grads = 0;    ///< the gradient buffer
    size_t working = 0;  ///< working copies of weights and fp32 unit gradients (device)
    std::vector<size_t> working_arrays;  ///< bytes of each working slot, one device allocation each
  };
  /// What a MixedPrecisionBuffers for this plan and model allocates.
  static Bytes sizes(const ZeroPlan& plan, const ParamLayout& layout);

  /// Collective over `comm` (CommBuffer): where the step reduces the gradients in place
  /// (ZeroPlan::grads_reduced_in_place), their buffer is the communicator's shared memory if it
  /// has some, so that the peers read it in place.
  MixedPrecisionBuffers(const ZeroPlan& plan, const ParamLayout& layout, Backend& backend, DataComm& comm);
  ~MixedPrecisionBuffers();
  MixedPrecisionBuffers(const MixedPrecisionBuffers&) = delete;
  MixedPrecisionBuffers& operator=(const MixedPrecisionBuffers&) = delete;
  const ParamLayout& layout() const { return layout_; }

  /// Element `flat` of the flat layout in the parameter / gradient buffer (inside the plan's range).
  unsigned char* param_at(size_t flat) { return params_.data() + (flat - plan_.params_base) * plan_.elem(); }
  unsigned char* grad_at(size_t flat) { return grads_.data() + (flat - plan_.grads_base) * plan_.grad_elem(); }
  void* params() { return params_.data(); }
  /// The gradients are in the data communicator's shared memory.
  bool grads_shared() const { return grads_.shared(); }

  /// Stages 0-2: the unit's weights in the working dtype on the compute stream, valid until the
  /// next step.
  const void* working_weights(int unit);
  /// The fp32 slot backward accumulates the unit's gradient into, zeroed on the compute stream
  /// (the gradient buffer itself in fp32 at stages 0/1).
  float* grad_slot(int unit);
  /// The unit's finished gradient slot, or nullptr when it was accumulated in place.
  float* finished_grad_slot(int unit);
  /// The weights changed: working copies (and weight packs) are stale.
  void invalidate_weights();
  /// Where the plan allows (ZeroPlan::weights_packable): lets the bf16 kernels keep the
  /// parameters packed for their GEMMs (KernelOps::weight_packs), made stale by
  /// invalidate_weights() and dropped with this object. The caller vouches that nothing else
  /// writes the parameters between steps. Returns whether the kernels keep packs.
  bool keep_weight_packs();
  /// Zeroes the gradients where they live (device, or host memory at stage 3 with offload).
  void zero_grads();

  Bytes bytes() const;
  /// Bytes of the buffers held on the device (what is not in host memory).
  size_t device_param_bytes() const { return plan_.params_on_host ? 0 : params_.bytes(); }
  size_t device_grad_bytes() const { return plan_.grads_on_host ? 0 : grads_.bytes(); }

 private:
  struct Slot {
    int unit = -1;
    DeviceArray<unsigned char> data;
  };
  void* working_slot(std::vector<Slot>& slots, int unit, bool& fresh);

  const ZeroPlan& plan_;
  const ParamLayout& layout_;
  Backend& backend_;
  Stream& compute_;
  DeviceArray<unsigned char> params_;
  CommBuffer grads_;
  std::vector<Slot> weight_slots_, grad_slots_;
  bool packs_ = false;  // the bf16 kernels keep the parameters packed (keep_weight_packs)
};

}  // namespace zt
