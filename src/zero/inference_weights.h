// ZeRO-Inference: the weights of a generation run placed as a DeepSpeed config places a training
// run's parameters, without gradients or optimizer state ("ZeRO Inference uses the same config as
// ZeRO-3 Training").
//   stage 3   each rank holds its partition (Ψ/N) in the config's dtype: on the device, in host
//             memory with offload_param cpu, or in ParamSwapper's file with offload_param nvme;
//             the PartitionedParameterCoordinator gathers a unit before the decoder reads it and
//             frees it after, with stage3_prefetch_bucket_size, stage3_max_live_parameters and
//             stage3_param_persistence_threshold as in training
//   stage 0-2 every rank holds every weight, in fp32 on the device, rounded through the config's
//             dtype (so one config generates the same ids at every stage)
// The weights come from a StateSource's master range (an HF folder, or our checkpoint), each rank
// reading its own partition a bounded chunk at a time: the model is never whole on one rank.
#pragma once

#include <algorithm>
#include <memory>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "model/model_layout.h"
#include "model/param_source.h"
#include "zero/model_states.h"
#include "zero/parameter_coordinator.h"
#include "zero/zero_plan.h"

namespace zt {

class InferenceWeights final : public ParamSource<float> {
 public:
  /// Reads the weights from `source` (its kMaster field). Collective: every rank constructs it.
  InferenceWeights(const DsConfig& config, const ModelLayout& layout, Backend& backend, DataComm& comm,
                   const StateSource& source);

  const float* acquire_weights(int unit) override;
  void release_weights(int unit) override;
  float* grad_accumulator(int unit) override;
  void grads_done(int) override {}

  /// The decoder finished a forward pass; `another`: a pass follows on every rank. Collective at
  /// stage 3, where the ranks must run the same passes (the gathers are collectives).
  void end_pass(bool another);
  /// Stage 3: the ranks gather together, so each forward pass must be every rank's.
  bool lockstep() const { return coordinator_ != nullptr; }
  const ZeroPlan& plan() const { return plan_; }
  /// The most elements gathered at once (stage 3).
  size_t peak_live_parameters() const { return coordinator_ ? coordinator_->peak_live_elements() : 0; }

  /// Elements a rank reads from the source at a time, and converts, while loading.
  static constexpr size_t kLoadChunk = size_t(1) << 22;
  /// Pinned bytes stages 0-2 load through (a chunk of fp32; stage 3 reads into host vectors).
  static size_t load_staging_bytes(const ModelLayout& layout) {
    return std::min(kLoadChunk, layout.flat_size()) * sizeof(float);
  }

 private:
  void load_partition(const StateSource& source);
  void load_whole(const StateSource& source);

  const ModelLayout& layout_;
  Backend& backend_;
  ZeroPlan plan_;
  DeviceArray<unsigned char> partition_;  // stage 3 without offload_param nvme: this rank's part
  DeviceArray<float> whole_;              // stages 0-2: every weight
  std::unique_ptr<PartitionedParameterCoordinator> coordinator_;
};

}  // namespace zt
