#include "zero/recommender.h"

#include <cmath>

#include "core/error.h"
#include "model/model_layout.h"
#include "model/model_memory.h"
#include "zero/partition.h"

#include <algorithm>

namespace zt {

namespace {

struct RungSpec {
  const char* name;
  int stage;
  OffloadConfig::Device optimizer, params;
};

constexpr auto kNone = OffloadConfig::Device::kNone;
constexpr auto kCpu = OffloadConfig::Device::kCpu;
constexpr auto kNvme = OffloadConfig::Device::kNvme;

const RungSpec kLadder[] = {
    {"stage 0", 0, kNone, kNone},
    {"stage 1", 1, kNone, kNone},
    {"stage 2", 2, kNone, kNone},
    {"stage 2 + optimizer offload (cpu)", 2, kCpu, kNone},
    {"stage 3", 3, kNone, kNone},
    {"stage 3 + optimizer and parameter offload (cpu)", 3, kCpu, kCpu},
    {"stage 3 + optimizer on NVMe, parameters offloaded (cpu)", 3, kNvme, kCpu},
    {"stage 3 + optimizer and parameters on NVMe", 3, kNvme, kNvme},
};

std::string gib(double bytes) { return cat(std::round(bytes / 0x1p30 * 100) / 100, " GiB"); }

}  // namespace

Recommendation recommend(const ModelConfig& model, const DsConfig& base, const RunShape& run, const Hardware& hw) {
  Recommendation rec;
  for (const RungSpec& spec : kLadder) {
    const bool nvme = spec.optimizer == kNvme || spec.params == kNvme;
    if (nvme && hw.nvme_capacity == 0) continue;
    // --delayed_param_update runs with the optimizer offloaded and the parameters not: the other
    // rungs' configs would refuse the flag, so they are not offered.
    if (base.zero.delayed_param_update_after >= 0 && (spec.optimizer == kNone || spec.params != kNone)) continue;
    // The 1-bit optimizers run at stage 0 only (DeepSpeed's too): no other rung is a config they accept.
    if (base.optimizer.onebit() && spec.stage > 0) continue;
    RungVerdict v;
    v.name = spec.name;
    v.config = base;
    // The printed config carries no data_types: each rung runs with DeepSpeed's default gradient
    // dtype for its stage (an fp32 grad_accum_dtype given for stage 0 does not exist at stage 2).
    v.config.grad_accum_dtype.reset();
    ZeroConfig& z = v.config.zero;
    z.stage = spec.stage;
    z.offload_optimizer = OffloadConfig{};
    z.offload_param = OffloadConfig{};
    z.offload_param.buffer_count = 5;
    for (auto [target, device] : {std::pair{&z.offload_optimizer, spec.optimizer}, {&z.offload_param, spec.params}}) {
      target->device = device;
      target->pin_memory = device != kNone;
      if (device == kNvme) target->nvme_path = hw.nvme_path;
    }
    if (spec.optimizer == kNvme) {
      // Swap in pieces of 1/16 of a rank's state (1 Mi to 100 M elements), so that the
      // buffer_count swap buffers stay a small fraction of what moved to NVMe.
      const size_t partition = PartitionMap(make_model_layout(model)->flat_size(), run.world_size).partition_size;
      z.sub_group_size = int64_t(std::clamp<size_t>(partition / 16, size_t(1) << 20, 100'000'000));
    }
    if (spec.params == kNvme) z.offload_param.max_in_cpu = 0;  // all of it on NVMe: that is why this rung exists
    // What must fit the GPU: the device pool, or on a CUDA GPU all that the rank reserves there.
    auto gpu_bytes = [&](const MemoryEstimate& e) {
      return hw.cuda ? estimate_gpu_memory(e, run.world_size).total() : e.device_total();
    };
    v.estimate = estimate_memory(model, v.config, run);
    v.gpu_bytes = gpu_bytes(v.estimate);
    if (spec.stage == 3 && v.gpu_bytes > hw.gpu_memory) {
      // DeepSpeed's stage-3 defaults keep up to 1e9 parameters gathered; on a small GPU keep only
      // the unit in use and the next one (prefetched).
      const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
      size_t largest = 0, second = 0;
      for (int u = 0; u < layout->num_units(); ++u) {
        const size_t n = layout->unit_size(u);
        if (n > largest) {
          second = largest;
          largest = n;
        } else {
          second = std::max(second, n);
        }
      }
      DsConfig tight = v.config;
      tight.zero.stage3_max_live_parameters = int64_t(largest + second);
      tight.zero.stage3_max_reuse_distance = int64_t(largest + second);
      tight.zero.stage3_prefetch_bucket_size = int64_t(second);
      if (tight.zero.stage3_max_live_parameters < z.stage3_max_live_parameters) {
        v.config = tight;
        v.estimate = estimate_memory(model, v.config, run);
        v.gpu_bytes = gpu_bytes(v.estimate);
        v.name += cat(", stage3_max_live_parameters ", largest + second);
      }
    }
    const double per_node = run.ranks_per_node;
    if (v.gpu_bytes > hw.gpu_memory) {
      v.why_not = cat(hw.cuda ? "GPU " : "device ", gib(double(v.gpu_bytes)), " > ", gib(double(hw.gpu_memory)));
    } else if (double(v.estimate.host_total()) * per_node > double(hw.cpu_memory)) {
      v.why_not = cat("host ", gib(double(v.estimate.host_total()) * per_node), " per node > ", gib(double(hw.cpu_memory)));
    } else if (double(v.estimate.nvme_total()) * per_node > double(hw.nvme_capacity) && nvme) {
      v.why_not = cat("NVMe ", gib(double(v.estimate.nvme_total()) * per_node), " per node > ", gib(double(hw.nvme_capacity)));
    } else {
      v.fits = true;
    }
    rec.rungs.push_back(std::move(v));
    if (rec.rungs.back().fits) {
      rec.chosen = int(rec.rungs.size()) - 1;
      break;
    }
  }
  return rec;
}

namespace {

// The estimate's optimizer block (its state bytes were counted): its values from the trainer's
// flags ("auto"), with what else makes the rule as the estimated config had it.
boost::json::object optimizer_params_json(const OptimizerConfig& o) {
  namespace json = boost::json;
  json::object params{{"lr", "auto"}, {"weight_decay", "auto"}};
  if (o.type == OptimizerConfig::Type::kMuon) {
    // Its two groups' own rates (HF's flags know neither) and its AdamW's betas and eps, which
    // are not HF's defaults; lr, which the schedule scales both by, from --learning_rate.
    params["muon_lr"] = o.muon_lr;
    params["adam_lr"] = o.adam_lr;
    params["momentum"] = o.momentum;
    params["betas"] = json::array{o.beta1, o.beta2};
    params["eps"] = o.eps;
    params["ns_method"] = o.ns_method == OptimizerConfig::NsMethod::kGram ? "gram" : "standard";
    return params;
  }
  if (o.factored()) {  // torch.optim.Adafactor's keys
    params["beta2_decay"] = o.decay_rate;
    params["eps"] = json::array{o.adafactor_eps1, o.adafactor_eps2};
    params["d"] = o.clip_threshold;
    return params;
  }
  if (o.type != OptimizerConfig::Type::kAdagrad) params["betas"] = "auto";
  if (o.type == OptimizerConfig::Type::kAdagrad) params["eps"] = o.eps;  // torch's 1e-10, not --adam_epsilon
  if (o.type != OptimizerConfig::Type::kLion && o.type != OptimizerConfig::Type::kAdagrad) {
    params["eps"] = "auto";  // Adam, AdamW, Lamb
  }
  // What else makes the rule: the values the estimated config had, beside the flags' "auto".
  if (o.type == OptimizerConfig::Type::kAdam) params["adam_w_mode"] = o.adam_w_mode;
  if ((o.type == OptimizerConfig::Type::kAdam || o.type == OptimizerConfig::Type::kAdamW ||
       o.type == OptimizerConfig::Type::kLamb) && !o.bias_correction) {
    params["bias_correction"] = false;
  }
  if (o.type == OptimizerConfig::Type::kAdagrad && o.lr_decay != 0) {
    params["lr_decay"] = o.lr_decay;
  }
  if (o.type == OptimizerConfig::Type::kOneBitAdam || o.type == OptimizerConfig::Type::kOneBitLamb) {
    params["freeze_step"] = o.freeze_step;
  }
  if (o.type == OptimizerConfig::Type::kOneBitLamb) {
    params["coeff_beta"] = o.coeff_beta;
    params["factor_max"] = o.factor_max;
    params["factor_min"] = o.factor_min;
    params["factor_threshold"] = o.factor_threshold;
  }
  if (o.type == OptimizerConfig::Type::kZeroOneAdam) {
    params["var_freeze_step"] = o.var_freeze_step;
    params["var_update_scaler"] = o.var_update_scaler;
    params["local_step_scaler"] = o.local_step_scaler;
    params["local_step_clipper"] = o.local_step_clipper;
  }
  if (o.type == OptimizerConfig::Type::kLamb || o.type == OptimizerConfig::Type::kOneBitLamb) {
    params["max_coeff"] = o.max_coeff;
    params["min_coeff"] = o.min_coeff;
    if (o.eps_inside_sqrt) params["eps_inside_sqrt"] = true;
  }
  return params;
}

}  // namespace

boost::json::object ds_config_json(const DsConfig& c) {
  namespace json = boost::json;
  json::object out;
  out["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  out["gradient_accumulation_steps"] = "auto";
  out["gradient_clipping"] = "auto";
  out["bf16"] = json::object{{"enabled", c.bf16}};
  out["fp16"] = json::object{{"enabled", c.fp16.enabled}};
  // transformers' Adafactor has no DeepSpeed block (DeepSpeed's "Adafactor" is torch.optim's): it
  // stays with HF's --optim adafactor (and --optim_args), as the estimate was asked.
  if (!c.optimizer.factored() || c.optimizer.adafactor_torch) {
    out["optimizer"] =
        json::object{{"type", optimizer_name(c.optimizer.type)}, {"params", optimizer_params_json(c.optimizer)}};
  }
  const ZeroConfig& z = c.zero;
  json::object zero{{"stage", z.stage},
                    {"overlap_comm", z.stage >= 2},
                    {"contiguous_gradients", true},
                    {"reduce_bucket_size", z.reduce_bucket_size},
                    {"allgather_bucket_size", z.allgather_bucket_size}};
  if (z.stage == 3) {
    zero["stage3_prefetch_bucket_size"] = z.stage3_prefetch_bucket_size;
    zero["stage3_param_persistence_threshold"] = z.stage3_param_persistence_threshold;
    zero["stage3_max_live_parameters"] = z.stage3_max_live_parameters;
    zero["stage3_max_reuse_distance"] = z.stage3_max_reuse_distance;
    if (z.zero_quantized_weights) zero["zero_quantized_weights"] = true;
    if (z.zero_hpz_partition_size > 1) zero["zero_hpz_partition_size"] = z.zero_hpz_partition_size;
    if (z.zero_quantized_gradients) zero["zero_quantized_gradients"] = true;
  }
  auto offload = [](const OffloadConfig& o, bool params) {
    json::object b{{"device", o.device == kNvme ? "nvme" : "cpu"}, {"pin_memory", o.pin_memory}};
    if (o.device == kNvme) b["nvme_path"] = o.nvme_path;
    b["buffer_count"] = o.buffer_count;
    if (params && o.device == kNvme) {
      b["buffer_size"] = o.buffer_size;
      b["max_in_cpu"] = o.max_in_cpu;
    }
    if (!params && o.ratio < 1) b["ratio"] = o.ratio;
    return b;
  };
  if (z.offload_optimizer.enabled()) zero["offload_optimizer"] = offload(z.offload_optimizer, false);
  if (z.offload_param.enabled()) zero["offload_param"] = offload(z.offload_param, true);
  const bool nvme = z.offload_optimizer.device == kNvme || z.offload_param.device == kNvme;
  if (nvme) zero["sub_group_size"] = z.sub_group_size;
  out["zero_optimization"] = std::move(zero);
  if (nvme) {
    out["aio"] = json::object{{"block_size", c.aio.block_size},
                              {"queue_depth", c.aio.queue_depth},
                              {"intra_op_parallelism", c.aio.intra_op_parallelism},
                              {"single_submit", c.aio.single_submit},
                              {"overlap_events", c.aio.overlap_events}};
  }
  return out;
}

}  // namespace zt
