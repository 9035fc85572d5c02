#include "zero/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/gpt2_layout.h"
#include "offload/swap_file.h"
#include "zero/param_gatherer.h"
#include "zero/partition.h"

namespace zt {

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

int64_t largest_layer_params(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.n_positions;
  return std::max({V * C, P * C, 3 * C * C + 3 * C, 4 * C * C + 4 * C, 4 * C * C + C});
}

// ---- this engine ----

namespace {

// The transport's largest collective (MpiComm cuts collectives into 4 Mi-element pieces).
constexpr size_t kCollectivePiece = size_t(4) << 20;

size_t round_up(size_t x, size_t q) { return (x + q - 1) / q * q; }

}  // namespace

MemoryEstimate estimate_memory(const ModelConfig& model, const DsConfig& config, const RunShape& run) {
  const Gpt2Layout layout(model);
  const PartitionMap part(layout.flat_size(), run.world_size);
  const ZeroConfig& z = config.zero;
  const int stage = z.stage;
  const DType dtype = config.param_dtype();
  const size_t e = dtype_size(dtype), ce = dtype_size(config.communication_data_type.value_or(dtype));
  const size_t padded = part.padded_size, psize = part.partition_size;
  const bool sixteen = dtype != DType::kF32;
  MemoryEstimate est;
  auto add = [&](Pool p, size_t bytes) { est.by_pool[int(p)] += bytes; };

  // Model states (ZeroEngine's constructor).
  const OffloadConfig& off = z.offload_optimizer;
  const OffloadConfig& off_param = z.offload_param;
  const size_t opt_count = stage == 0 ? padded : psize;
  const size_t offloaded = off.enabled() ? size_t(std::llround(double(opt_count) * off.ratio)) : 0;
  const size_t device_count = opt_count - offloaded;
  const bool grads_on_host = stage == 3 && offloaded > 0 && device_count == 0;
  const bool params_on_host = stage == 3 && off_param.enabled();
  const bool params_on_nvme = params_on_host && off_param.device == OffloadConfig::Device::kNvme;
  const size_t params_bytes = (stage == 3 ? psize : padded) * e, grads_bytes = (stage >= 2 ? psize : padded) * e;
  est.offloaded_param_pool = off_param.pin_memory ? Pool::kPinned : Pool::kHost;
  est.offloaded_optimizer_pool = off.pin_memory ? Pool::kPinned : Pool::kHost;
  const Pool opt_pool = est.offloaded_optimizer_pool;

  bool param_file = false;  // offload_param nvme with more than max_in_cpu elements
  ModelStateBytes& dev = est.device_states;
  ModelStateBytes& moved = est.offloaded_states;
  if (!params_on_host) {
    dev.params = params_bytes;
    add(Pool::kDevice, params_bytes);
  } else if (!params_on_nvme) {
    moved.params = params_bytes;
    add(est.offloaded_param_pool, params_bytes);
  } else {
    // ParamSwapper: whole pages of max_in_cpu in memory, the rest in the swap file.
    const size_t page = kDirectAlignment / e;
    const size_t resident = std::min(psize, size_t(off_param.max_in_cpu) / page * page);
    const size_t file = psize > resident ? align_up((round_up(psize, page) - resident) * e) : 0;
    moved.params = resident * e + file;
    param_file = file > 0;
    add(est.offloaded_param_pool, resident * e);
    add(Pool::kNvme, file);
  }
  if (!grads_on_host) {
    dev.grads = grads_bytes;
    add(Pool::kDevice, grads_bytes);
  } else {
    moved.grads = grads_bytes;
    add(opt_pool, grads_bytes);
  }
  dev.master = sixteen ? device_count * 4 : 0;
  dev.exp_avg = dev.exp_avg_sq = device_count * 4;
  add(Pool::kDevice, dev.master + dev.exp_avg + dev.exp_avg_sq);
  if (offloaded > 0) {
    if (!grads_on_host) {  // the host copy the CPU Adam reads
      moved.grads = offloaded * e;
      add(opt_pool, moved.grads);
    }
    // OptimizerOffload: pieces of whole 2048-element multiples.
    const size_t piece = std::max<size_t>(2048, round_up(std::min(offloaded, size_t(z.sub_group_size)), 2048));
    est.offload_buffers += 2 * piece * e;  // the double-buffered staging of updated parameters
    if (off.device == OffloadConfig::Device::kCpu) {
      moved.master = moved.exp_avg = moved.exp_avg_sq = offloaded * 4;
      add(opt_pool, 3 * offloaded * 4);
    } else {
      const size_t pieces = (offloaded + piece - 1) / piece, slot = align_up(3 * piece * 4);
      moved.master = moved.exp_avg = moved.exp_avg_sq = slot * pieces / 3;
      add(Pool::kNvme, slot * pieces);
      est.offload_buffers += std::min<size_t>(size_t(off.buffer_count), pieces + 2) * slot;
    }
  }
  add(opt_pool, est.offload_buffers);
  if (param_file) {  // ParamSwapper's read buffers, sized for the largest slice a rank reads
    size_t largest_slice = 0;  // the worst rank's
    for (int r = 0; r < run.world_size; ++r) largest_slice = std::max(largest_slice, largest_owned_slice(layout, part, r));
    const size_t bytes = size_t(off_param.buffer_count) * (align_up(largest_slice * e) + 3 * kDirectAlignment);
    est.offload_buffers += bytes;
    add(est.offloaded_param_pool, bytes);
  }

  // Device buffers.
  size_t other_unit = 0;
  for (int u = 1; u < layout.num_units(); ++u) other_unit = std::max(other_unit, layout.unit_size(u));
  const size_t unit0 = layout.unit_size(0);
  if (stage >= 2) {  // GradBucketer: two buckets, send (+ receive with reduce_scatter)
    const size_t cap = std::min({size_t(z.reduce_bucket_size), padded, kCollectivePiece});
    est.buckets = 2 * (cap * ce + (z.reduce_scatter ? std::min(cap, psize) * ce : 0));
  } else if (run.world_size > 1) {  // stage 0/1 reduction staging
    const size_t chunk = std::min({size_t(z.reduce_bucket_size), padded, kCollectivePiece});
    const size_t send = ce != e ? chunk : 0, recv = stage == 1 ? std::min(chunk, psize) : 0;
    est.buckets = (send + recv) * ce;
  }
  if (sixteen && stage < 3) est.working += (unit0 + 2 * other_unit) * 4;  // fp32 copies of weights
  if (sixteen || stage >= 2) est.working += (unit0 + other_unit) * 4;     // fp32 unit gradients
  if (stage == 3) {
    // Gathered units (16-bit, plus an fp32 copy in mixed precision): at most
    // stage3_max_live_parameters at once, and with the default reuse distance every unit stays
    // gathered until the step. Freed buffers are kept for reuse by size, so up to one more unit's
    // worth may be allocated than is live.
    const size_t cap = size_t(std::min<int64_t>(z.stage3_max_live_parameters, int64_t(layout.flat_size())));
    const size_t live = std::min(cap < layout.flat_size() ? cap + layout.max_unit_size() : cap, layout.flat_size());
    est.gather = live * (e + (sixteen ? 4 : 0));
  }
  add(Pool::kDevice, est.buckets + est.working + est.gather);

  // Activations (Gpt2Model, fp32), sized for the larger of the train and eval batches. Per block
  // (kept for all L, or for one with checkpointing, which recomputes): ln1, qkv, attention output,
  // residual, ln2 (7C per token), the MLP's two 4C intermediates, four layernorm statistics per
  // token and the attention probabilities (H T per token). Plus every block's input, ln_f, the
  // logits and losses, and backward's scratch (14C per token).
  const size_t B = size_t(std::max(run.micro_batch, run.eval_batch)), T = size_t(run.seq_len);
  const size_t BT = B * T, C = size_t(model.n_embd), V = size_t(model.vocab_size), H = size_t(model.n_head);
  const size_t per_block = BT * 15 * C + 4 * BT + B * H * T * T;
  const size_t kept_blocks = run.gradient_checkpointing ? 1 : size_t(model.n_layer);
  const size_t elements = (size_t(model.n_layer) + 1) * BT * C + kept_blocks * per_block + BT * C + 3 * BT +
                          BT * V + 14 * BT * C;
  est.activations = elements * 4;
  add(Pool::kDevice, est.activations);
  return est;
}

}  // namespace zt
