#include "zero/memory_estimate.h"

#include "zero/mics_groups.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "backend/cuda/caching_allocator_rules.h"
#include "backend/kernel_ops.h"
#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "config/train_args.h"
#include "core/error.h"
#include "model/decoder.h"
#include "model/model_layout.h"
#include "model/model_memory.h"
#include "zero/gradient_reducer.h"
#include "zero/inference_weights.h"
#include "zero/mixed_precision_buffers.h"
#include "zero/adafactor_factors.h"
#include "zero/muon_matrices.h"
#include "zero/onebit_compression.h"
#include "zero/optimizer_partition.h"
#include "zero/parameter_coordinator.h"
#include "zero/zero_plan.h"

namespace zt {

size_t max_collective_elements(const RunShape& run) {
  return run.cuda ? kNcclMaxCollectiveElements : kMpiMaxCollectiveElements;
}

// ---- DeepSpeed ----
// deepspeed/runtime/zero/stage_1_and_2.py and stage3.py. Python's int() truncates the products,
// as here. Python's ints do not overflow; ours would past 2^63 bytes, so such a row is an error.

namespace {

int64_t table_bytes(double bytes) {
  ZT_USAGE_CHECK(bytes < 0x1p62, "--params: the estimate is ", bytes / 0x1p60,
                 " EiB per CPU or GPU, beyond any machine; check the parameter count and the factor");
  return int64_t(bytes);
}

}  // namespace

std::vector<DeepSpeedEstimateRow> deepspeed_zero2_rows(double total, int gpus_per_node, int num_nodes,
                                                       double factor) {
  const double total_gpus = double(num_nodes) * gpus_per_node;
  std::vector<DeepSpeedEstimateRow> rows;
  for (bool cpu_offload : {true, false}) {
    DeepSpeedEstimateRow r;
    r.offload_optimizer = cpu_offload;
    if (cpu_offload) {
      r.gpu_bytes = table_bytes(2 * total);
      r.cpu_bytes = table_bytes(total * std::max(4 * total_gpus, 16.0) * factor);
    } else {
      // 2 bytes of 16-bit parameters; 18 = 16-bit and fp32 gradients, fp32 master, two moments.
      r.gpu_bytes = table_bytes(2 * total + std::trunc(18 * total / total_gpus));
      r.cpu_bytes = table_bytes(total * 4 * gpus_per_node * factor);
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<DeepSpeedEstimateRow> deepspeed_zero3_rows(double total, double largest, int gpus_per_node,
                                                       int num_nodes, double factor) {
  const double total_gpus = double(num_nodes) * gpus_per_node, gpus_factor = 1.0 / num_nodes;
  const double largest_memory = 4 * largest;
  std::vector<DeepSpeedEstimateRow> rows;
  for (bool cpu_offload : {true, false}) {
    for (bool offload_params : {true, false}) {
      if (!cpu_offload && offload_params) continue;
      for (bool zero_init : {true, false}) {
        DeepSpeedEstimateRow r;
        r.offload_optimizer = cpu_offload;
        r.offload_param = offload_params;
        r.zero_init = zero_init;
        double cpu = 0, gpu = 0;
        if (cpu_offload && offload_params) {
          gpu = largest_memory;
          cpu = zero_init ? total * 18 * gpus_factor * factor
                          : total * std::max(4.0 * gpus_per_node, 18 * gpus_factor) * factor;
        } else if (cpu_offload) {
          gpu = largest_memory + std::trunc(2 * total / total_gpus);
          cpu = zero_init ? total * 16 * gpus_factor * factor
                          : total * std::max(4.0 * gpus_per_node, 16 * gpus_factor) * factor;
        } else {
          gpu = largest_memory + std::trunc(18 * total / total_gpus);
          cpu = zero_init ? largest * 4 * gpus_per_node * factor : total * 4 * gpus_per_node * factor;
        }
        r.cpu_bytes = table_bytes(cpu);
        r.gpu_bytes = table_bytes(gpu);
        rows.push_back(r);
      }
    }
  }
  return rows;
}

std::string deepspeed_table(int stage, double total, double largest, int gpus_per_node, int num_nodes,
                            double factor) {
  ZT_USAGE_CHECK(stage == 2 || stage == 3, "--stage: DeepSpeed's table exists for stages 2 and 3, got ", stage);
  auto line = [](const char* format, auto... args) {
    char buffer[256];
    std::snprintf(buffer, sizeof buffer, format, args...);
    return std::string(buffer);
  };
  std::string out = "Estimated memory needed for params, optim states and gradients for a:\n";
  out += cat("HW: Setup with ", num_nodes, num_nodes > 1 ? " nodes, " : " node, ", gpus_per_node,
             gpus_per_node > 1 ? " GPUs" : " GPU", " per node.\n");
  const auto rows = stage == 2 ? deepspeed_zero2_rows(total, gpus_per_node, num_nodes, factor)
                               : deepspeed_zero3_rows(total, largest, gpus_per_node, num_nodes, factor);
  // The rows bound total and largest (table_bytes), so the millions fit.
  out += cat("SW: Model with ", int64_t(total / 1e6), "M total params",
             stage == 3 ? cat(", ", int64_t(largest / 1e6), "M largest layer params.") : std::string("."), "\n");
  out += "  per CPU  |  per GPU |   Options\n";
  // DeepSpeed formats the device as f"{OffloadDeviceEnum.cpu:4}": "cpu " padded to four.
  for (const DeepSpeedEstimateRow& r : rows) {
    std::string options;
    if (stage == 3) options = cat("offload_param=", r.offload_param ? "cpu " : "none", ", ");
    options += cat("offload_optimizer=", r.offload_optimizer ? "cpu " : "none");
    if (stage == 3) options += cat(", zero_init=", r.zero_init ? 1 : 0);
    out += line(" %7.2fGB | %6.2fGB | %s\n", double(r.cpu_bytes) / 0x1p30, double(r.gpu_bytes) / 0x1p30,
                options.c_str());
  }
  return out;
}

// ---- this engine ----

// Every line below is a component's own size function, for the plan the engine would make: the
// arithmetic lives with the allocation it describes.
MemoryEstimate estimate_memory(const ModelConfig& model, const DsConfig& config, const RunShape& run) {
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
  // A CPU run's answer is this CPU's: plan on the kind of machine that will train.
  const bool native_bf16_gemm = run.cuda || cpu_has_native_bf16_gemm();
  const DType activation_dtype = resolve_activation_dtype(run.activation_dtype, config.param_dtype(), native_bf16_gemm);
  // MiCS: each rank holds what a stage-3 rank of its shard group's size holds.
  const int shard_ranks = mics_shard_ranks(config, run.world_size);
  const ZeroPlan plan(config, layout->flat_size(), shard_ranks, /*rank=*/0, /*kernels_reach_host=*/!run.cuda,
                      activation_dtype);
  const size_t max_collective = max_collective_elements(run);
  MemoryEstimate est;
  auto add = [&](Pool p, size_t bytes) { est.by_pool[int(p)] += bytes; };
  // One device allocation, or a list of them (empty arrays allocate nothing).
  auto list_device = [&](Pool p, size_t bytes) {
    if (p == Pool::kDevice && bytes > 0) est.device_allocations.push_back(bytes);
  };
  auto list_devices = [&](const std::vector<size_t>& arrays) {
    for (size_t bytes : arrays) list_device(Pool::kDevice, bytes);
  };
  est.offloaded_param_pool = plan.offloaded_param_pool;

  // Model states: the 16-bit buffers, wherever the plan puts them.
  const MixedPrecisionBuffers::Bytes mp = MixedPrecisionBuffers::sizes(plan, *layout);
  ModelStateBytes& dev = est.device_states;
  ModelStateBytes& moved = est.offloaded_states;
  (plan.params_on_host ? moved.params : dev.params) = mp.params;
  add(plan.param_pool, mp.params);
  list_device(plan.param_pool, mp.params);
  (plan.grads_on_host ? moved.grads : dev.grads) = mp.grads;
  add(plan.grad_pool, mp.grads);
  list_device(plan.grad_pool, mp.grads);
  // Stage 3's parameter store: ParamSwapper's resident part, file and read buffers (nvme).
  const OffloadFootprint store = PartitionedParameterCoordinator::store_footprint(plan, *layout, config);
  moved.params += store.host_state + store.nvme;
  add(est.offloaded_param_pool, store.host_state + store.buffers);
  add(Pool::kNvme, store.nvme);
  // The optimizer partition: master and moments on the device, the offloaded part's state.
  const OptimizerPartition::Bytes opt =
      OptimizerPartition::sizes(plan, config, layout->tensor_ranges(), layout->tensor_shapes());
  est.offloaded_optimizer_pool = opt.host_pool;
  dev.master = opt.device.master;
  dev.exp_avg = opt.device.exp_avg;
  dev.exp_avg_sq = opt.device.exp_avg_sq;
  add(Pool::kDevice, dev.master + dev.exp_avg + dev.exp_avg_sq);
  // An array each; OneBitLamb's exp_avg_sq_fresh, counted with exp_avg_sq, is one more.
  const size_t fresh = config.optimizer.has_exp_avg_sq_fresh() ? plan.device_count * sizeof(float) : 0;
  for (size_t bytes : {dev.master, dev.exp_avg, dev.exp_avg_sq - fresh, fresh}) list_device(Pool::kDevice, bytes);
  std::vector<size_t> factors;  // Adafactor's row and column factors (state), replicated on every rank
  if (config.optimizer.factored()) {
    factors = AdafactorFactors::device_allocations(layout->tensor_shapes());
    dev.exp_avg_sq += factors[0] + factors[1];
    add(Pool::kDevice, factors[0] + factors[1]);
  }
  moved.master = opt.offloaded.master;
  moved.exp_avg = opt.offloaded.exp_avg;
  moved.exp_avg_sq = opt.offloaded.exp_avg_sq;
  if (!plan.grads_on_host) moved.grads += opt.offloaded.grads;
  add(opt.host_pool, opt.host + opt.buffers);
  add(Pool::kNvme, opt.nvme);
  est.offload_buffers = opt.buffers + store.buffers;
  if (config.optimizer.factored() && plan.offloaded > 0) {  // the factors' host copies
    const size_t copies = AdafactorFactors::host_copy_bytes(layout->tensor_shapes());
    est.offload_buffers += copies;
    add(Pool::kHost, copies);
  }

  // Device buffers: buckets, working copies, gathered units (the worst case), activations.
  est.buckets = GradientReducer::buffer_bytes(plan, config.zero, max_collective, run.ranks_per_node,
                                              layout->tensor_ranges().size());
  est.working = mp.working;
  // MiCS's hierarchical gathers stage each unit's pieces from across the nodes.
  const int hierarchical = PartitionedParameterCoordinator::hierarchical_per_node(
      config.zero, block_nodes(plan.world, std::max(run.ranks_per_node, 1)));
  est.gather = PartitionedParameterCoordinator::gather_bytes(plan, *layout, config.zero, hierarchical);
  // Muon's updates, exchange staging and Newton-Schulz workspace: the ranks own different
  // matrices, so the rank that allocates most.
  if (config.optimizer.type == OptimizerConfig::Type::kMuon) {
    std::vector<size_t> most;
    for (int r = 0; r < shard_ranks; ++r) {
      const ZeroPlan rank_plan(config, layout->flat_size(), shard_ranks, r, !run.cuda, activation_dtype);
      std::vector<size_t> arrays = MuonMatrices::buffer_allocations(
          rank_plan, config.optimizer, layout->tensor_ranges(), layout->tensor_shapes(),
          std::min(size_t(config.zero.allgather_bucket_size), max_collective));
      size_t total = 0;
      for (size_t b : arrays) total += b;
      if (total > est.optimizer) est.optimizer = total, most = std::move(arrays);
    }
    list_devices(most);
  }
  if (!factors.empty()) {  // Adafactor's sums and scaled rows; the state above
    est.optimizer = factors[2] + factors[3];
    list_devices(factors);
  }
  if (config.optimizer.onebit()) {  // its errors, signs and scales
    const std::vector<std::pair<size_t, size_t>> compressed = onebit_tensors(config.optimizer, *layout);
    est.optimizer = OneBitCompression::device_bytes(compressed, run.world_size);
    list_devices(OneBitCompression::device_allocations(compressed, run.world_size));
    if (config.optimizer.type == OptimizerConfig::Type::kOneBitLamb) {  // its packed momenta
      est.optimizer += compressed[0].second * sizeof(float);
      list_devices({compressed[0].second * sizeof(float)});
    }
  }
  if (config.optimizer.type == OptimizerConfig::Type::kZeroOneAdam) {  // its momentum accumulator
    est.optimizer += plan.device_count * sizeof(float);
    list_devices({plan.device_count * sizeof(float)});
  }
  add(Pool::kDevice, est.buckets + est.working + est.gather + est.optimizer);
  list_devices(GradientReducer::buffer_allocations(plan, config.zero, max_collective, run.ranks_per_node,
                                                   layout->tensor_ranges().size()));
  list_devices(mp.working_arrays);
  list_devices(PartitionedParameterCoordinator::gather_allocations(plan, *layout, config.zero, hierarchical));
  // Activations are sized for the larger of the train and eval batches.
  const size_t batch = size_t(std::max(run.micro_batch, run.eval_batch));
  // The CUDA bf16 kernels' attention is flash attention for head sizes 64 and 128: it saves each
  // row's logsumexp, not the probabilities (KernelOps::attention_saves_lse, cuda_kernels_bf16.h),
  // and its backward keeps D = rowsum(dO * O) in the backend's scratch, B NH T floats.
  const size_t BT = batch * size_t(run.seq_len);
  const size_t probabilities = batch * size_t(model.n_head) * run.seq_len * run.seq_len;
  const bool cuda_bf16 = run.cuda && activation_dtype == DType::kBF16;
  const bool flash = cuda_bf16 && (model.head_size() == 64 || model.head_size() == 128);
  // Every bf16 table's attention saves the logsumexp: the GPU's (flash, or its fp32 fallback) and
  // the CPU's (backend/cpu/lse_attention.h).
  const bool attention_lse = activation_dtype == DType::kBF16;
  // Its logits rows are padded to 16-byte alignment for the lm_head's tensor-core GEMMs.
  const size_t logits_stride = cuda_bf16 ? size_t(aligned_logits_stride(model.vocab_size)) : 0;
  // The classifier's chunk (CausalLM's constructor): the rows of logits held at once.
  const size_t logits_rows = classifier_logits_rows(
      BT, (logits_stride ? logits_stride : size_t(model.vocab_size)) * dtype_size(activation_dtype),
      run.classifier_chunk);
  std::vector<size_t> activations = activation_allocations(model, batch, size_t(run.seq_len),
                                                           run.gradient_checkpointing, activation_dtype, attention_lse,
                                                           logits_stride, logits_rows);
  // A GPU's kernels share one scratch buffer, as large as their largest request. Besides the
  // attention's and the classifier's below, the column sums of bias and norm-weight gradients
  // (cuda_bf16.cuh, cuda_column_sums.cuh) take 8 bytes for each of about 4 x 256 columns per SM,
  // bounded here for up to 256 SMs, or for every column where the rows make one chunk; the
  // embedding's token links, 8 bytes a token, are fewer than flash attention's D; the sum of
  // squares' per-block partials, 8 bytes for each of at most 16 blocks per SM, fewer still.
  const size_t widest = size_t(std::max({model.n_embd, 4 * model.n_embd, model.intermediate_size}));
  const size_t column_sums = 8 * std::max<size_t>(size_t(4) * 256 * 256, widest);
  if (cuda_bf16) {
    // The attention's (flash: D; other head sizes: fp32 copies of q, k, v, dout and the gradients,
    // at most 8 C per token as C >= NH hs, and two layers' worth of probabilities rebuilt from the
    // logsumexp) or the classifier's padded head where V is not a multiple of 64 (kernel_ops.h).
    const size_t attention = flash ? sizeof(float) * batch * size_t(model.n_head) * run.seq_len
                                   : sizeof(float) * (8 * BT * size_t(model.n_embd) + 2 * probabilities);
    activations.push_back(
        std::max({attention, padded_classifier_scratch_bytes(model.vocab_size, model.n_embd), column_sums}));
  } else if (run.cuda) {
    // The fp32 attention's backward keeps its softmax gradient in the backend's scratch buffer
    // (backend/cuda/cuda_attention.cu): as large as one layer's saved probabilities.
    activations.push_back(std::max(sizeof(float) * probabilities, column_sums));
  } else if (activation_dtype == DType::kBF16) {
    // The CPU's bf16 kernels widen their operands into an fp32 arena a tile at a time
    // (backend/cpu/bf16_kernels.cpp); the GEMMs and attention (the engine's bf16 matmul mode)
    // only where this CPU's bf16 GEMMs do not take the operands as they lie.
    est.kernel_scratch = cpu_bf16_scratch_bytes(model, batch, size_t(run.seq_len), logits_rows,
                                                cpu::kBf16ScratchFloats, cpu_bf16_gemm_in_place());
    activations.push_back(est.kernel_scratch);
  }
  // The CPU's bf16 kernels' weight packs, where the plan lets the engine keep them
  // (MixedPrecisionBuffers::keep_weight_packs).
  if (!run.cuda && !run.emulated && plan.weights_packable()) {
    for (size_t bytes : bf16_weight_packs(model, cpu_bf16_weight_pack_bytes)) {
      est.weight_packs += bytes;
      list_device(Pool::kDevice, bytes);
    }
    add(Pool::kDevice, est.weight_packs);
  }
  for (size_t bytes : activations) est.activations += bytes;
  add(Pool::kDevice, est.activations);
  list_devices(activations);
  return est;
}

// ---- a generation run ----

// InferenceWeights' allocations and the decoder's, each from its own size function.
GenerationMemory estimate_generation_memory(const ModelConfig& model, const DsConfig& config, int world_size,
                                            int slots, int positions) {
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
  const ZeroPlan plan = ZeroPlan::inference(config, layout->flat_size(), world_size, /*rank=*/0);
  GenerationMemory m;
  m.slots = slots;
  auto add = [&](Pool p, size_t bytes) { m.by_pool[int(p)] += bytes; };
  if (plan.params_replicated()) {
    m.weights = layout->flat_size() * sizeof(float);
    add(Pool::kDevice, m.weights);
  } else {
    m.weights = plan.params_on_nvme ? 0 : plan.params_count * plan.elem();
    add(plan.param_pool, m.weights);
    m.gather = PartitionedParameterCoordinator::gather_bytes(plan, *layout, config.zero);
    add(Pool::kDevice, m.gather);
    const OffloadFootprint store = PartitionedParameterCoordinator::store_footprint(plan, *layout, config);
    m.weights += store.host_state;
    add(plan.offloaded_param_pool, store.host_state + store.buffers);
    add(Pool::kNvme, store.nvme);
  }
  const DecoderMemory d = decoder_memory(*layout, positions, slots);
  m.kv_cache = d.kv_cache;
  m.decoder = d.device;
  add(Pool::kDevice, d.kv_cache + d.device);
  // Stages 0-2 load through a pinned chunk, freed before the decoder's staging is allocated.
  const size_t load = plan.params_replicated() ? InferenceWeights::load_staging_bytes(*layout) : 0;
  m.staging = std::max(load, d.pinned);
  add(Pool::kPinned, m.staging);
  return m;
}

size_t GenerationMemory::kv_cache_per_sequence() const { return kv_cache / size_t(std::max(slots, 1)); }

// ---- the GPU view ----

// The allocator's behaviour for blocks that are never freed, from its rules: a small block comes
// from the free space of a small segment (the smallest that fits) or a new 2 MiB segment; a large
// one from a large segment's split-off remainder (the smallest that fits), else a new segment.
size_t cuda_reserved_bytes(const std::vector<size_t>& requests) {
  std::vector<size_t> small_free, large_free;  // free blocks left in the segments so far
  size_t reserved = 0;
  auto best_fit = [](std::vector<size_t>& free, size_t block) {
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (*it >= block && (best == free.end() || *it < *best)) best = it;
    }
    return best;
  };
  for (size_t request : requests) {
    if (request == 0) continue;
    const size_t block = cuda::block_bytes(request);
    const bool small = cuda::is_small(request);
    std::vector<size_t>& free = small ? small_free : large_free;
    auto it = best_fit(free, block);
    size_t from;  // the free block this one is cut from
    if (it != free.end()) {
      from = *it;
      free.erase(it);
    } else {
      from = small ? cuda::kSmallSegment : cuda::large_segment_bytes(request);
      reserved += from;
    }
    // What is left is split off as a free block: any remainder of a small segment, and 1 MiB or
    // more of a large one (less stays part of the block).
    const size_t rest = from - block;
    if (small ? rest > 0 : rest >= cuda::kSmallRequest) free.push_back(rest);
  }
  return reserved;
}

GpuMemoryEstimate estimate_gpu_memory(const MemoryEstimate& e, int world_size) {
  GpuMemoryEstimate g;
  g.model_states = e.device_states.total();
  g.buffers = e.buckets + e.gather + e.working + e.optimizer;
  g.activations = e.activations;
  size_t asked = 0;
  for (size_t bytes : e.device_allocations) asked += bytes;
  g.rounding = cuda_reserved_bytes(e.device_allocations) - asked;
  g.context = cuda::kContextBytes + cuda::kCublasLtWorkspaceBytes;
  g.nccl = world_size > 1 ? cuda::kNcclBuffersBytes : 0;
  return g;
}

}  // namespace zt
