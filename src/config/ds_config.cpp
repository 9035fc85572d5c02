#include "config/ds_config.h"

#include <algorithm>
#include <cmath>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "core/error.h"

namespace zt {

namespace {

// Fills `out` from "auto" or from the config. When both the config and an explicit trainer flag
// give a value and they differ, that is an error, as HF Trainer's DeepSpeed integration reports.
template <typename T, typename... Bounds>
void read_auto(JsonSection& s, std::string_view key, T& out, const AutoValue<T>& flag,
               const char* flag_name, Bounds... bounds) {
  if (s.is_auto(key)) {
    s.mark_read(key);
    out = flag.value;
    return;
  }
  if (s.read(key, out, bounds...) && flag.explicit_flag && out != flag.value) {
    s.fail(key, cat("the config says ", out, " but ", flag_name, " says ", flag.value,
                    "; make them agree or set the key to \"auto\""));
  }
}

void read_auto_bool(JsonSection& s, std::string_view key, bool& out, const AutoValue<bool>& flag,
                    const char* flag_name) {
  if (s.is_auto(key)) {
    s.mark_read(key);
    out = flag.value;
    return;
  }
  if (s.read(key, out) && flag.explicit_flag && out != flag.value) {
    s.fail(key, cat("the config says ", out ? "true" : "false", " but ", flag_name, " says ",
                    flag.value ? "true" : "false"));
  }
}

// Bucket sizes: "auto" follows HF Trainer (hidden_size squared).
void read_bucket(JsonSection& s, std::string_view key, int64_t& out, int64_t auto_value) {
  if (s.is_auto(key)) {
    s.mark_read(key);
    if (auto_value <= 0) s.fail(key, "\"auto\" needs the model's hidden size");
    out = auto_value;
    return;
  }
  s.read(key, out, 1);
}

OptimizerConfig parse_optimizer(JsonSection s, const AutoValues& autos) {
  OptimizerConfig o;
  // Without an optimizer section the trainer still needs one: AdamW from the HF flags, which is
  // what HF Trainer does when the DeepSpeed config names none.
  o.lr = autos.learning_rate.value;
  o.beta1 = autos.adam_beta1.value;
  o.beta2 = autos.adam_beta2.value;
  o.eps = autos.adam_epsilon.value;
  o.weight_decay = autos.weight_decay.value;
  if (!s.present()) return o;

  std::string type;
  if (!s.read("type", type)) s.fail("type", "the optimizer needs a type (Adam or AdamW)");
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "adam") {
    o.type = OptimizerConfig::Type::kAdam;
  } else if (lower == "adamw") {
    o.type = OptimizerConfig::Type::kAdamW;
  } else {
    static const char* kDeepSpeedOptimizers[] = {"lamb", "onebitadam", "zerooneadam", "onebitlamb",
                                                 "adagrad", "sgd", "lion", "muadam", "muadamw",
                                                 "musgd", "cpu_adam", "fusedadam"};
    for (const char* known : kDeepSpeedOptimizers) {
      if (lower == known) s.fail("type", cat("optimizer '", type, "' is not implemented by zerotrain (Adam and AdamW are)"));
    }
    s.fail("type", cat("unknown optimizer '", type, "'; the closest known is '",
                       closest_key(type, {"Adam", "AdamW"}), "'"));
  }

  JsonSection p = s.child("params");
  read_auto(p, "lr", o.lr, autos.learning_rate, "--learning_rate", 0.0);
  if (p.is_auto("betas")) {
    p.mark_read("betas");
    o.beta1 = autos.adam_beta1.value;
    o.beta2 = autos.adam_beta2.value;
  } else {
    std::vector<double> betas;
    if (p.read_numbers("betas", betas, 2)) {
      for (double b : betas) {
        if (b < 0 || b >= 1) p.fail("betas", cat("each beta must be in [0, 1), got ", b));
      }
      if ((autos.adam_beta1.explicit_flag && autos.adam_beta1.value != betas[0]) ||
          (autos.adam_beta2.explicit_flag && autos.adam_beta2.value != betas[1])) {
        p.fail("betas", "the config and --adam_beta1/--adam_beta2 disagree");
      }
      o.beta1 = betas[0];
      o.beta2 = betas[1];
    }
  }
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  read_auto(p, "weight_decay", o.weight_decay, autos.weight_decay, "--weight_decay", 0.0);
  p.read("adam_w_mode", o.adam_w_mode);
  p.read("bias_correction", o.bias_correction);
  bool flag = false;
  if (p.read("amsgrad", flag) && flag) p.fail("amsgrad", "AMSGrad is not implemented by zerotrain");
  if (p.read("torch_adam", flag) && flag) {
    p.fail("torch_adam", "zerotrain has its own fused Adam; torch_adam: true is not implemented");
  }
  p.not_implemented({"fused", "foreach", "capturable", "maximize", "set_grad_none", "fp32_optimizer_states"},
                    "PyTorch optimizer switches have no meaning here");
  p.finish();
  s.finish();
  // Only "AdamW" forces decoupled decay; "Adam" follows adam_w_mode (default true), as DeepSpeed.
  if (o.type == OptimizerConfig::Type::kAdamW) o.adam_w_mode = true;
  return o;
}

SchedulerConfig parse_scheduler(JsonSection s, const AutoValues& autos) {
  SchedulerConfig c;
  if (!s.present()) {
    // No DeepSpeed scheduler: HF Trainer's own, from --lr_scheduler_type.
    static const std::vector<std::string> kNames = {"linear", "cosine", "constant", "constant_with_warmup"};
    const std::string& name = autos.lr_scheduler_type.value;
    auto it = std::find(kNames.begin(), kNames.end(), name);
    if (it == kNames.end()) {
      throw UsageError(cat("--lr_scheduler_type: '", name, "' is not implemented; the closest known is '",
                           closest_key(name, kNames), "'"));
    }
    c.trainer_type = SchedulerConfig::TrainerType(it - kNames.begin());
    c.warmup_num_steps = autos.warmup_steps.value;
    c.total_num_steps = autos.max_steps.value;
    return c;
  }
  if (autos.lr_scheduler_type.explicit_flag) {
    s.fail("type", "the config has a scheduler, so --lr_scheduler_type would be ignored; drop one of them");
  }
  std::string type;
  if (!s.read("type", type)) s.fail("type", "the scheduler needs a type");
  static const std::vector<std::string> kTypes = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                  "OneCycle", "LRRangeTest"};
  auto it = std::find(kTypes.begin(), kTypes.end(), type);
  if (it == kTypes.end()) {
    s.fail("type", cat("unknown scheduler '", type, "'; the closest known is '", closest_key(type, kTypes), "'"));
  }
  c.type = SchedulerConfig::Type(1 + (it - kTypes.begin()));
  JsonSection p = s.child("params");
  using T = SchedulerConfig::Type;
  auto read_warmup_type = [&] {
    std::string warmup_type = "log";
    p.read("warmup_type", warmup_type);
    if (warmup_type != "log" && warmup_type != "linear") {
      p.fail("warmup_type", cat("must be \"log\" or \"linear\", got \"", warmup_type, "\""));
    }
    c.warmup_type_log = warmup_type == "log";
  };
  AutoValue<int64_t> max_steps = autos.max_steps;
  switch (c.type) {
    case T::kWarmupLR:
    case T::kWarmupDecayLR: {
      AutoValue<double> zero{0.0};
      read_auto(p, "warmup_min_lr", c.warmup_min_lr, zero, "(auto: 0)", 0.0);
      double max_lr = autos.learning_rate.value;
      if (p.is_auto("warmup_max_lr")) {
        p.mark_read("warmup_max_lr");
        c.warmup_max_lr = autos.learning_rate.value;
      } else if (p.read("warmup_max_lr", max_lr, 0.0)) {
        c.warmup_max_lr = max_lr;
      }
      read_auto(p, "warmup_num_steps", c.warmup_num_steps, autos.warmup_steps, "--warmup_steps", int64_t(0));
      read_warmup_type();
      if (c.type == T::kWarmupDecayLR) {
        read_auto(p, "total_num_steps", c.total_num_steps, max_steps, "--max_steps", int64_t(1));
        if (!p.has("total_num_steps")) p.fail("total_num_steps", "WarmupDecayLR needs total_num_steps");
      }
      break;
    }
    case T::kWarmupCosineLR:
      read_auto(p, "total_num_steps", c.total_num_steps, max_steps, "--max_steps", int64_t(1));
      if (!p.has("total_num_steps")) p.fail("total_num_steps", "WarmupCosineLR needs total_num_steps");
      read_auto(p, "warmup_num_steps", c.warmup_num_steps, autos.warmup_steps, "--warmup_steps", int64_t(0));
      p.read("warmup_min_ratio", c.warmup_min_ratio, 0.0, 1.0);
      p.read("cos_min_ratio", c.cos_min_ratio, 0.0, 1.0);
      read_warmup_type();
      break;
    case T::kOneCycle: {
      if (!p.read("cycle_min_lr", c.cycle_min_lr, 0.0)) p.fail("cycle_min_lr", "OneCycle needs cycle_min_lr");
      if (!p.read("cycle_max_lr", c.cycle_max_lr, 0.0)) p.fail("cycle_max_lr", "OneCycle needs cycle_max_lr");
      p.read("decay_lr_rate", c.decay_lr_rate, 0.0);
      p.read("cycle_first_step_size", c.cycle_first_step_size, 1);
      int64_t v = 0;
      if (p.read("cycle_second_step_size", v, 1)) c.cycle_second_step_size = v;
      p.read("cycle_first_stair_count", c.cycle_first_stair_count, 0);
      if (p.read("cycle_second_stair_count", v, 0)) c.cycle_second_stair_count = v;
      p.read("decay_step_size", c.decay_step_size, 0);
      p.read("cycle_momentum", c.cycle_momentum);
      p.read("cycle_min_mom", c.cycle_min_mom, 0.0, 1.0);
      p.read("cycle_max_mom", c.cycle_max_mom, 0.0, 1.0);
      p.read("decay_mom_rate", c.decay_mom_rate, 0.0);
      break;
    }
    case T::kLRRangeTest:
      p.read("lr_range_test_min_lr", c.lr_range_test_min_lr, 0.0);
      p.read("lr_range_test_step_size", c.lr_range_test_step_size, 1);
      p.read("lr_range_test_step_rate", c.lr_range_test_step_rate, 0.0);
      p.read("lr_range_test_staircase", c.lr_range_test_staircase);
      break;
    case T::kTrainer: break;
  }
  p.finish();
  s.finish();
  return c;
}

Fp16Config parse_fp16(JsonSection s, const AutoValues& autos) {
  Fp16Config c;
  c.enabled = autos.fp16.value;
  read_auto_bool(s, "enabled", c.enabled, autos.fp16, "--fp16");
  s.read("loss_scale", c.loss_scale, 0.0);
  s.read("initial_scale_power", c.initial_scale_power, 0, 64);
  s.read("loss_scale_window", c.loss_scale_window, 1);
  s.read("hysteresis", c.hysteresis, 1);
  s.read("consecutive_hysteresis", c.consecutive_hysteresis);
  s.read("min_loss_scale", c.min_loss_scale, 0.0);
  bool flag = false;
  if (s.read("auto_cast", flag) && flag) s.fail("auto_cast", "auto_cast: true is not implemented by zerotrain");
  s.not_implemented({"fp16_master_weights_and_grads"}, "master weights are always fp32");
  s.finish();
  return c;
}

OffloadConfig parse_offload(JsonSection s, bool params) {
  OffloadConfig o;
  if (params) o.buffer_count = 5;
  std::string device = "none";
  s.read("device", device);
  if (device == "cpu") {
    o.device = OffloadConfig::Device::kCpu;
  } else if (device == "nvme") {
    o.device = OffloadConfig::Device::kNvme;
  } else if (device != "none") {
    s.fail("device", cat("must be \"none\", \"cpu\" or \"nvme\", got \"", device, "\""));
  }
  s.read("nvme_path", o.nvme_path);
  s.read("pin_memory", o.pin_memory);
  s.read("buffer_count", o.buffer_count, 1);
  if (params) {
    s.read("buffer_size", o.buffer_size, 1);
    s.read("max_in_cpu", o.max_in_cpu, 0);
  } else {
    s.read("ratio", o.ratio, 0.0, 1.0);
    bool pipeline = false;  // DeepSpeed's switches for what the swapper here always does
    s.read("pipeline_read", pipeline);
    s.read("pipeline_write", pipeline);
    s.read("fast_init", pipeline);
  }
  if (o.device == OffloadConfig::Device::kNvme && o.nvme_path.empty()) {
    s.fail("nvme_path", "device \"nvme\" needs nvme_path (a directory on the NVMe drive)");
  }
  if (o.device != OffloadConfig::Device::kCpu && o.ratio != 1.0) {
    s.fail("ratio", "partial offload applies to device \"cpu\" only");
  }
  s.finish();
  return o;
}

AioConfig parse_aio(JsonSection s) {
  AioConfig a;
  s.read("block_size", a.block_size, 4096);
  if (a.block_size % 4096 != 0) s.fail("block_size", cat(a.block_size, " is not a multiple of 4096 (O_DIRECT)"));
  s.read("queue_depth", a.queue_depth, 1, 4096);
  // intra_op_parallelism is DeepSpeed's current name, thread_count the older one.
  const bool has_new = s.read("intra_op_parallelism", a.intra_op_parallelism, 1, 64);
  int64_t threads = 0;
  if (s.read("thread_count", threads, 1, 64)) {
    if (has_new && threads != a.intra_op_parallelism) {
      s.fail("thread_count", cat("is the old name of intra_op_parallelism and disagrees with it (", threads,
                                 " vs ", a.intra_op_parallelism, ")"));
    }
    a.intra_op_parallelism = threads;
  }
  s.read("single_submit", a.single_submit);
  s.read("overlap_events", a.overlap_events);
  bool flag = false;
  if (s.read("use_gds", flag) && flag) s.fail("use_gds", "GPUDirect Storage is not implemented by zerotrain");
  s.finish();
  return a;
}

ZeroConfig parse_zero(JsonSection s, const AutoValues& autos) {
  ZeroConfig z;
  s.read("stage", z.stage, 0, 3);
  s.read("contiguous_gradients", z.contiguous_gradients);
  s.read("overlap_comm", z.overlap_comm);
  s.read("reduce_scatter", z.reduce_scatter);
  s.read("allgather_partitions", z.allgather_partitions);
  int64_t hidden_sq = autos.hidden_size * autos.hidden_size;
  read_bucket(s, "reduce_bucket_size", z.reduce_bucket_size, hidden_sq);
  read_bucket(s, "allgather_bucket_size", z.allgather_bucket_size, hidden_sq);
  // Stage 3 limits; "auto" as HF Trainer fills them: 0.9 h^2 for prefetch, 10 h for persistence.
  s.read("stage3_max_live_parameters", z.stage3_max_live_parameters, 1);
  s.read("stage3_max_reuse_distance", z.stage3_max_reuse_distance, 0);
  read_bucket(s, "stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, int64_t(0.9 * double(hidden_sq)));
  if (s.is_auto("stage3_param_persistence_threshold")) {
    s.mark_read("stage3_param_persistence_threshold");
    z.stage3_param_persistence_threshold = 10 * autos.hidden_size;
  } else {
    s.read("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, 0);
  }
  z.offload_optimizer = parse_offload(s.child("offload_optimizer"), false);
  z.offload_param = parse_offload(s.child("offload_param"), true);
  s.read("sub_group_size", z.sub_group_size, 1);
  if (z.offload_optimizer.enabled() && z.stage == 0) {
    s.fail("offload_optimizer", "needs ZeRO stage 1, 2 or 3 (the offloaded optimizer steps a partition)");
  }
  if (z.offload_param.enabled() && z.stage != 3) {
    s.fail("offload_param", cat("needs ZeRO stage 3 (stage ", z.stage, " keeps every parameter on each rank)"));
  }
  s.read("stage3_gather_16bit_weights_on_model_save", z.stage3_gather_16bit_weights_on_model_save);
  bool legacy_name = false;  // DeepSpeed's older spelling of the same switch
  if (s.read("stage3_gather_fp16_weights_on_model_save", legacy_name)) {
    z.stage3_gather_16bit_weights_on_model_save = z.stage3_gather_16bit_weights_on_model_save || legacy_name;
  }
  s.not_implemented({"elastic_checkpoint", "load_from_fp32_weights"},
                    "zerotrain checkpoints always load from the fp32 master weights at any world size; drop the key");
  s.not_implemented({"stage3_model_persistence_threshold", "round_robin_gradients"},
                    "no equivalent in zerotrain's flat-buffer engine");
  s.not_implemented({"cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory"},
                    "deprecated in DeepSpeed; use offload_optimizer / offload_param");
  s.not_implemented({"zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
                     "zero_quantized_gradients", "mics_shard_size", "mics_hierarchical_params_gather",
                     "memory_efficient_linear", "pipeline_loading_checkpoint", "override_module_apply",
                     "use_all_reduce_for_fetch_params", "ignore_unused_parameters", "legacy_stage1",
                     "stage3_module_granularity_threshold", "log_trace_cache_warnings"},
                    "ZeRO++/MiCS and module-hook options have no equivalent here");
  s.finish();
  return z;
}

// DeepSpeed's batch arithmetic: any two of the three sizes determine the third; all three must
// satisfy train = micro * accumulation * world.
void resolve_batch(JsonSection& top, DsConfig& c, const AutoValues& autos) {
  const int world = autos.world_size;
  bool has_train = false, has_micro = false, has_gas = false;
  if (top.is_auto("train_batch_size")) {
    top.mark_read("train_batch_size");
  } else {
    has_train = top.read("train_batch_size", c.train_batch_size, 1);
  }
  if (top.is_auto("train_micro_batch_size_per_gpu")) {
    top.mark_read("train_micro_batch_size_per_gpu");
    c.train_micro_batch_size_per_gpu = autos.micro_batch.value;
    has_micro = true;
  } else {
    has_micro = top.read("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, 1);
    if (has_micro && autos.micro_batch.explicit_flag && c.train_micro_batch_size_per_gpu != autos.micro_batch.value) {
      top.fail("train_micro_batch_size_per_gpu", cat("the config says ", c.train_micro_batch_size_per_gpu,
               " but --per_device_train_batch_size says ", autos.micro_batch.value));
    }
  }
  if (top.is_auto("gradient_accumulation_steps")) {
    top.mark_read("gradient_accumulation_steps");
    c.gradient_accumulation_steps = autos.grad_accum.value;
    has_gas = true;
  } else {
    has_gas = top.read("gradient_accumulation_steps", c.gradient_accumulation_steps, 1);
    if (has_gas && autos.grad_accum.explicit_flag && c.gradient_accumulation_steps != autos.grad_accum.value) {
      top.fail("gradient_accumulation_steps", cat("the config says ", c.gradient_accumulation_steps,
               " but --gradient_accumulation_steps says ", autos.grad_accum.value));
    }
  }
  // Without a micro batch or an explicit accumulation, the trainer's flags fill them in.
  if (!has_micro && !has_train) {
    c.train_micro_batch_size_per_gpu = autos.micro_batch.value;
    has_micro = true;
  }
  if (!has_gas && !has_train) {
    c.gradient_accumulation_steps = autos.grad_accum.value;
    has_gas = true;
  }
  if (has_train && has_micro && !has_gas) {
    int64_t denom = c.train_micro_batch_size_per_gpu * world;
    if (c.train_batch_size % denom != 0) {
      top.fail("train_batch_size", cat(c.train_batch_size, " is not divisible by micro batch ",
                                       c.train_micro_batch_size_per_gpu, " x world size ", world));
    }
    c.gradient_accumulation_steps = c.train_batch_size / denom;
  } else if (has_train && has_gas && !has_micro) {
    int64_t denom = c.gradient_accumulation_steps * world;
    if (c.train_batch_size % denom != 0) {
      top.fail("train_batch_size", cat(c.train_batch_size, " is not divisible by gradient_accumulation_steps ",
                                       c.gradient_accumulation_steps, " x world size ", world));
    }
    c.train_micro_batch_size_per_gpu = c.train_batch_size / denom;
  } else if (has_train && !has_micro && !has_gas) {
    if (c.train_batch_size % world != 0) {
      top.fail("train_batch_size", cat(c.train_batch_size, " is not divisible by world size ", world));
    }
    c.gradient_accumulation_steps = 1;
    c.train_micro_batch_size_per_gpu = c.train_batch_size / world;
  }
  int64_t product = c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * world;
  if (has_train && c.train_batch_size != product) {
    top.fail("train_batch_size", cat(c.train_batch_size, " != train_micro_batch_size_per_gpu (",
                                     c.train_micro_batch_size_per_gpu, ") x gradient_accumulation_steps (",
                                     c.gradient_accumulation_steps, ") x world size (", world, ") = ", product));
  }
  c.train_batch_size = product;
}

}  // namespace

DsConfig parse_ds_config(const boost::json::value& json, const std::string& source,
                         const AutoValues& autos) {
  if (!json.is_object()) throw UsageError(cat(source, ": the config must be a JSON object"));
  JsonSection top(&json.get_object(), "", source);
  DsConfig c;
  c.source = source;
  resolve_batch(top, c, autos);
  top.read("steps_per_print", c.steps_per_print, 1);
  top.read("wall_clock_breakdown", c.wall_clock_breakdown);
  c.gradient_clipping = autos.max_grad_norm.value;
  read_auto(top, "gradient_clipping", c.gradient_clipping, autos.max_grad_norm, "--max_grad_norm", 0.0);
  c.optimizer = parse_optimizer(top.child("optimizer"), autos);
  c.scheduler = parse_scheduler(top.child("scheduler"), autos);
  c.fp16 = parse_fp16(top.child("fp16"), autos);
  {
    JsonSection b = top.child("bf16");
    c.bf16 = autos.bf16.value;
    read_auto_bool(b, "enabled", c.bf16, autos.bf16, "--bf16");
    b.not_implemented({"immediate_grad_update", "check_grad_overflow"}, "bf16 always keeps fp32 master weights here");
    b.finish();
  }
  if (c.fp16.enabled && c.bf16) top.fail("bf16", "fp16 and bf16 cannot both be enabled");
  c.zero = parse_zero(top.child("zero_optimization"), autos);
  std::string comm_type;
  if (top.read("communication_data_type", comm_type)) {
    try {
      c.communication_data_type = parse_dtype(comm_type);
    } catch (const UsageError& e) {
      top.fail("communication_data_type", e.what());
    }
  }
  top.not_implemented({"prescale_gradients", "gradient_predivide_factor"},
                      "zerotrain sums gradients and divides by the world size after reducing (DeepSpeed's default)");
  top.not_implemented({"sparse_gradients", "fp32_allreduce", "disable_allgather",
                       "seq_parallel_communication_data_type"},
                      "use communication_data_type / allgather_partitions");
  {
    JsonSection ck = top.child("checkpoint");
    ck.read("use_node_local_storage", c.checkpoint_node_local);
    std::string tag_validation = "Warn";
    if (ck.read("tag_validation", tag_validation) && tag_validation != "Warn" && tag_validation != "Ignore" &&
        tag_validation != "Fail") {
      ck.fail("tag_validation", cat("must be Warn, Ignore or Fail, got \"", tag_validation, "\""));
    }
    // zerotrain's tags are agreed collectively before loading, so every mode behaves as "Fail".
    ck.not_implemented({"load_universal", "parallel_write"}, "zerotrain checkpoints reshard on load as they are");
    ck.finish();
  }
  c.aio = parse_aio(top.child("aio"));
  top.not_implemented({"amp"}, "use fp16 or bf16");
  top.not_implemented({"activation_checkpointing"}, "use --gradient_checkpointing (per-block recompute)");
  top.not_implemented({"flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "communication_logger",
                       "memory_breakdown", "dump_state"},
                      "monitoring goes to OUTPUT/metrics.jsonl");
  top.not_implemented({"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"},
                      "zerotrain has only its built-in Adam/AdamW");
  top.not_implemented({"sparse_attention", "pipeline", "curriculum_learning", "data_efficiency",
                       "compression_training", "elasticity", "autotuning", "quantize_training", "eigenvalue",
                       "progressive_layer_drop", "hybrid_engine", "weight_quantization", "nebula",
                       "data_types", "torch_autocast", "graph_harvesting",
                       "use_data_before_expert_parallelism", "tensor_parallel"},
                      "outside zerotrain's data-parallel ZeRO scope");
  top.finish();
  return c;
}

DsConfig load_ds_config(const std::string& path, const AutoValues& autos) {
  return parse_ds_config(read_json_file(path), path, autos);
}

}  // namespace zt
