// Memory estimates before launching (zero_estimate):
//
// 1. DeepSpeed's model-state estimators, number for number: estimate_zero2/3_model_states_mem_needs
//    and the table their *_all_cold functions print (current DeepSpeed release), so users can check
//    our tool against the one they know.
// 2. What this engine will allocate per rank for a given model, config and batch: model states by
//    kind and where they live (device, host, pinned, NVMe), the temporary buffers (buckets,
//    gathered parameters, working copies, swap buffers) and the activations, as the sum of the
//    size functions of the engine's components (MixedPrecisionBuffers, GradientReducer,
//    PartitionedParameterCoordinator, OptimizerPartition, and through them OptimizerOffload and
//    ParamSwapper) for the plan the engine would make, and the model's own activation count. A
//    test runs the trainer and compares.
// 3. On a CUDA GPU, what a rank reserves for that (the GPU view, zero_estimate --accelerator
//    cuda): the device pool's bytes served by the caching allocator, which rounds each allocation
//    (backend/cuda/caching_allocator_rules.h), plus the process's fixed costs: the CUDA context,
//    cuBLASLt's workspace and, with more than one rank, NCCL's buffers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/ds_config.h"
#include "config/model_config.h"
#include "core/memory_pool.h"
#include "model/model_memory.h"
#include "zero/model_states.h"

namespace zt {

// ---- DeepSpeed's model-state estimators ----

struct DeepSpeedEstimateRow {
  int64_t cpu_bytes = 0, gpu_bytes = 0;
  bool offload_optimizer = false, offload_param = false, zero_init = false;  // zero_init: stage 3 only
};

/// estimate_zero2_model_states_mem_needs for cpu_offload true, then false (the table's order).
std::vector<DeepSpeedEstimateRow> deepspeed_zero2_rows(double total_params, int gpus_per_node, int num_nodes,
                                                       double additional_buffer_factor);
/// estimate_zero3_model_states_mem_needs for the table's five... six rows, in its order.
std::vector<DeepSpeedEstimateRow> deepspeed_zero3_rows(double total_params, double largest_layer_params,
                                                       int gpus_per_node, int num_nodes,
                                                       double additional_buffer_factor);
/// The text estimate_zero{2,3}_model_states_mem_needs_all_cold prints.
std::string deepspeed_table(int stage, double total_params, double largest_layer_params, int gpus_per_node,
                            int num_nodes, double additional_buffer_factor);

// ---- this engine ----

/// The shape of the run being estimated.
struct RunShape {
  int world_size = 1;
  int ranks_per_node = 1;
  int micro_batch = 1;
  int eval_batch = 8;  ///< --per_device_eval_batch_size: activations are sized for the larger batch
  int seq_len = 1024;
  bool gradient_checkpointing = false;
  /// --activation_dtype: auto, fp32 or bf16 (resolve_activation_dtype, with the config's dtype).
  std::string activation_dtype = "auto";
  /// --classifier_chunk_tokens as parse_classifier_chunk gives it (-1: auto).
  int classifier_chunk = -1;
  /// On CUDA GPUs: the gradients stay on the device (ZeroPlan's kernels_reach_host is false) and
  /// the data path is NCCL's, whose collectives are not cut at MPI's limit.
  bool cuda = false;
  /// On the emulated device (--accelerator emulated): the CPU's kernels behind queues, which keep
  /// no weight packs.
  bool emulated = false;
};

/// The data path's largest collective in elements on such a run (NCCL's or MPI's): the gradient
/// buckets' size limit.
size_t max_collective_elements(const RunShape& run);

/// Bytes per rank.
struct MemoryEstimate {
  ModelStateBytes device_states, offloaded_states;
  Pool offloaded_param_pool = Pool::kHost, offloaded_optimizer_pool = Pool::kHost;
  size_t buckets = 0, working = 0, gather = 0;  ///< device buffers
  size_t optimizer = 0;  ///< device: Muon's updates, exchange staging and Newton-Schulz workspace (the largest rank's)
  size_t offload_buffers = 0;                   ///< swap and staging buffers, in the optimizer's host pool
  size_t activations = 0;
  /// Of `activations`: the CPU bf16 kernels' fp32 scratch (allocated at the first step, where the
  /// start event's activation_bytes counts only the model's arrays).
  size_t kernel_scratch = 0;
  /// The CPU bf16 kernels' weight packs (device; allocated at the weights' first GEMMs), a bf16
  /// model's at stages 0-2 where oneDNN's bf16 GEMMs run (KernelOps::weight_packs).
  size_t weight_packs = 0;
  /// The device pool's allocations one by one, in bytes (the size functions' lists), for the
  /// GPU view's rounding. They add up to device_total(), except that stage 3's gathered units
  /// are the largest that fit under gather's bound.
  std::vector<size_t> device_allocations;
  /// Everything above, by pool.
  std::array<size_t, kNumPools> by_pool{};
  size_t device_total() const { return by_pool[int(Pool::kDevice)]; }
  size_t host_total() const { return by_pool[int(Pool::kHost)] + by_pool[int(Pool::kPinned)]; }
  size_t nvme_total() const { return by_pool[int(Pool::kNvme)]; }
};

MemoryEstimate estimate_memory(const ModelConfig& model, const DsConfig& config, const RunShape& run);

/// A generation run's peak bytes per rank (zero_generate --deepspeed, ZeRO-Inference): the weights
/// where InferenceWeights puts them, stage 3's gathered units (the worst case) and parameter
/// store, and the decoder's KV caches and buffers for `slots` sequences of `positions` tokens.
struct GenerationMemory {
  size_t weights = 0;     ///< stage 3: this rank's partition (any pool); stages 0-2: the model in fp32
  size_t gather = 0;      ///< stage 3: gathered units and their fp32 working copies (device)
  size_t kv_cache = 0;    ///< every sequence's keys and values (device)
  size_t decoder = 0;     ///< the decoder's other device buffers
  size_t staging = 0;     ///< pinned: the decoder's, or stages 0-2's load chunk, the larger
  int slots = 1;
  std::array<size_t, kNumPools> by_pool{};  ///< everything above, and the store's, by pool
  size_t kv_cache_per_sequence() const;
};
GenerationMemory estimate_generation_memory(const ModelConfig& model, const DsConfig& config, int world_size,
                                            int slots, int positions);

// ---- the GPU view ----

/// GPU memory the CUDA caching allocator reserves (its cudaMalloc segments) to serve allocations
/// of `requests` bytes made in this order and all kept: small blocks packed into shared 2 MiB
/// segments (best fit), large ones in segments rounded up to 2 MiB, whose split-off remainder
/// (1 MiB or more) a later large block may take.
size_t cuda_reserved_bytes(const std::vector<size_t>& requests);

/// GPU memory per rank on a CUDA GPU, by what it holds.
struct GpuMemoryEstimate {
  size_t model_states = 0;  ///< the model states on the device
  size_t buffers = 0;       ///< buckets, gathered parameters, working copies
  size_t activations = 0;
  size_t rounding = 0;      ///< what the caching allocator reserves beyond the bytes asked for
  size_t context = 0;       ///< the CUDA context and cuBLASLt's workspace
  size_t nccl = 0;          ///< NCCL's buffers (more than one rank, one GPU each)
  size_t total() const { return model_states + buffers + activations + rounding + context + nccl; }
  bool fits(uint64_t gpu_memory) const { return total() <= gpu_memory; }
};

/// The GPU view of `estimate` for a run of `world_size` ranks.
GpuMemoryEstimate estimate_gpu_memory(const MemoryEstimate& estimate, int world_size);

}  // namespace zt
