// What a rank of the ZeRO engine holds, and where, as its config and world size decide: the one
// place these rules are stated. Every component of the engine sizes itself from a plan, and
// zero_estimate builds the same plan for a run that has not started (memory_estimate.cpp), so the
// estimate cannot drift from what the engine allocates.
//
// Per stage (Ψ parameters, N ranks):
//
//   stage   params (16-bit)   grads (16-bit)   fp32 master + Adam moments   gradient reduction
//     0        Ψ                 Ψ                 Ψ                        all-reduce at the step
//     1        Ψ                 Ψ                 Ψ/N                      reduce-scatter at the step
//     2        Ψ                 Ψ/N               Ψ/N                      reduce-scatter per bucket in backward
//     3        Ψ/N               Ψ/N               Ψ/N                      ... and all-gather each unit before use
//
// The optimizer range [opt_begin, opt_begin + opt_count) is what this rank's Adam updates. With
// ZeRO-Offload its last `offloaded` elements keep their state in host memory or on NVMe and are
// stepped by the CPU; the first `device_count` stay on the device.
#pragma once

#include <cstddef>

#include "config/ds_config.h"
#include "core/dtype.h"
#include "core/memory_pool.h"
#include "zero/partition.h"

namespace zt {

struct ZeroPlan {
  /// `kernels_reach_host` (Backend::kernels_reach_host_memory): whether the backend's kernels and
  /// collectives may write host memory; without it the gradients stay on the device.
  /// `working_dtype`: the dtype the model computes with (its activation dtype, kernel_ops.h).
  /// `training` false: see inference().
  ZeroPlan(const DsConfig& config, size_t flat_size, int world_size, int rank, bool kernels_reach_host = true,
           DType working_dtype = DType::kF32, bool training = true);
  /// ZeRO-Inference's plan: the parameters held as for training (stage 3 partitions them,
  /// offload_param keeps the partition in host memory or on NVMe), and no gradient or optimizer
  /// state, so none of the rules that tie offload_param to offload_optimizer apply.
  static ZeroPlan inference(const DsConfig& config, size_t flat_size, int world_size, int rank,
                            DType working_dtype = DType::kF32);

  int stage, world, rank;
  DType dtype;       ///< parameters (bf16, fp16 or fp32)
  DType grad_dtype;  ///< gradients (DsConfig::grad_dtype: fp32 for bf16 at stage 0 by default)
  DType comm_dtype;  ///< communication_data_type, else dtype
  /// The weights as the model reads them (fp32 or bf16): where it differs from dtype, each unit is
  /// cast into a working copy before use; where it is the same, the model reads the parameters.
  DType working_dtype;
  PartitionMap partition;

  size_t opt_begin = 0, opt_count = 0;  ///< the optimizer's flat range
  size_t device_count = 0;              ///< ... whose state stays on the device
  size_t offloaded = 0;                 ///< ... whose state is offloaded (offload_optimizer)

  /// The 16-bit buffers: parameters [params_base, params_base + params_count) of the flat
  /// layout (padded), gradients likewise.
  size_t params_base = 0, params_count = 0, grads_base = 0, grads_count = 0;
  Pool param_pool = Pool::kDevice, grad_pool = Pool::kDevice;
  /// The host pool of what offload_param / offload_optimizer move (pinned with pin_memory).
  Pool offloaded_param_pool = Pool::kHost, offloaded_optimizer_pool = Pool::kHost;
  bool params_on_host = false;  ///< offload_param (stage 3): the parameter partition in host memory or NVMe
  bool params_on_nvme = false;  ///< offload_param.device nvme: in ParamSwapper's file
  /// Stage 3, whole optimizer offloaded, on a backend whose kernels reach host memory: reduce
  /// straight into host memory instead of a device partition copied out.
  bool grads_on_host = false;
  /// --delayed_param_update: from this many steps on, the offloaded part's CPU Adam runs beside
  /// the next step's forward and backward (-1: never).
  int64_t delayed_update_after = -1;
  bool training = true;  ///< false: ZeroPlan::inference (no gradients, no optimizer range)
  /// ZeRO++ hpZ (stage 3): the secondary partition's groups of this many consecutive ranks, which
  /// serve every gather of a unit after its first since the parameters changed; 1 without
  /// (zero_hpz_partition_size 1, or at least the world: the secondary would be the partition).
  int hpz = 1;
  /// hpZ: the parameters cut over a group's ranks; rank r holds secondary.begin(r % hpz) on.
  PartitionMap secondary;

  size_t elem() const { return dtype_size(dtype); }
  size_t grad_elem() const { return dtype_size(grad_dtype); }
  size_t working_elem() const { return dtype_size(working_dtype); }
  /// Units are cast to working copies before the model reads them.
  bool working_copies() const { return dtype != working_dtype; }
  size_t offload_begin() const { return opt_begin + device_count; }
  size_t opt_end() const { return opt_begin + opt_count; }
  /// Every rank holds every parameter (stages 0-2); stage 3 gathers units before use.
  bool params_replicated() const { return stage <= 2; }
  /// Every rank holds the whole optimizer state and gradient (stage 0).
  bool optimizer_replicated() const { return stage == 0; }
  /// A separate fp32 master copy exists (16-bit training); in fp32 the parameters are the master.
  bool has_master() const { return dtype != DType::kF32; }
  /// Stages 0, 1 across ranks with the gradients already in communication_data_type: the step's
  /// collectives run on the gradient buffer itself (GradientReducer::reduce_at_step).
  bool grads_reduced_in_place() const {
    return stage <= 1 && world > 1 && comm_dtype == grad_dtype && !grads_on_host;
  }
  /// A bf16 model reads the bf16 parameters themselves, in place from one step to the next, and
  /// only the step or a load writes them (stages 0-2, not under the delayed update, which writes
  /// them while the next forward runs): the CPU's bf16 GEMMs may keep them packed
  /// (KernelOps::weight_packs; MixedPrecisionBuffers::keep_weight_packs, the memory estimate).
  bool weights_packable() const {
    return params_replicated() && dtype == DType::kBF16 && working_dtype == DType::kBF16 && delayed_update_after < 0;
  }
};

}  // namespace zt
