// The DeepSpeed configuration (ds_config.json) as typed structs. Parsing is strict: an unknown key
// is an error naming its path and "did you mean" the closest known key; a DeepSpeed key zerotrain does not act on
// is accepted with a notice at a value that changes nothing here (DeepSpeed's default, a disabled
// feature) and is an error naming key, value and why at any other; "auto" is resolved from the
// trainer's HF-style flags (AutoValues). Defaults are DeepSpeed's. docs/ds_config.md lists every
// key of DeepSpeed 0.19.6 with its row.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zt {

struct OptimizerConfig {
  /// DeepSpeed's optimizer.type names (HF's --optim names map onto them).
  enum class Type { kAdam, kAdamW, kLion, kAdagrad, kLamb, kMuon, kAdafactor, kOneBitAdam, kZeroOneAdam, kOneBitLamb };
  Type type = Type::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  ///< Adam's moments; Lion's interpolation (beta1) and momentum (beta2)
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2 (Adam with adam_w_mode false, Adagrad) or decoupled (AdamW, Lion)
  /// DeepSpeed's "Adam" also means decoupled decay unless adam_w_mode is set to false.
  bool adam_w_mode = true;
  bool bias_correction = true;
  double lr_decay = 0.0;  ///< Adagrad (torch.optim.Adagrad): lr / (1 + (t - 1) lr_decay)
  /// Lamb (DeepSpeed's FusedLamb): the trust ratio ||w|| / ||update|| of each tensor is clamped to
  /// [min_coeff, max_coeff]; eps_inside_sqrt puts eps under the square root.
  double max_coeff = 10.0, min_coeff = 0.01;
  bool eps_inside_sqrt = false;
  /// Muon (DeepSpeed's MuonWithAuxAdam): the hidden 2-D weight matrices step with momentum and
  /// Newton-Schulz orthogonalisation at muon_lr; every other tensor (embeddings, lm_head, norms,
  /// biases) with AdamW at adam_lr, betas and eps. Both lrs follow the schedule in proportion to lr.
  double momentum = 0.95;
  double muon_lr = 0.02, adam_lr = 3e-4;
  enum class NsMethod { kGram, kStandard };
  NsMethod ns_method = NsMethod::kGram;  ///< DeepSpeed's default: Gram Newton-Schulz
  int ns_steps = 5;
  /// Adafactor (Shazeer & Stern 2018): each 2-D tensor keeps its second moment factored into a
  /// row and a column average (HF's stored shape); 1-D tensors keep it element by element.
  /// Two variants: transformers' Adafactor (HF --optim adafactor) adds eps1 to every g^2, and
  /// torch.optim.Adafactor (DeepSpeed's "Adafactor", which DeepSpeed builds from torch.optim)
  /// clamps the estimate at eps1^2 instead, always steps relatively and scales by the weight's RMS.
  bool adafactor_torch = false;
  double decay_rate = -0.8;                 ///< beta2_t = 1 - t^decay_rate (torch's beta2_decay)
  double adafactor_eps1 = 1e-30, adafactor_eps2 = 1e-3;  ///< the g^2 floor; the RMS floor of the weights
  double clip_threshold = 1.0;              ///< the update's RMS clip (torch's d)
  bool scale_parameter = false, relative_step = false, warmup_init = false;  ///< HF Trainer's: false, false
  std::optional<double> adafactor_beta1;    ///< transformers' optional first moment (exp_avg)
  /// 1-bit Adam (DeepSpeed's OnebitAdam, arXiv 2102.02888): Adam without bias correction until
  /// step freeze_step; after it exp_avg_sq is frozen, gradients stay local, and each step's
  /// exp_avg goes through an error-compensated 1-bit all-reduce instead.
  int64_t freeze_step = 100000;
  /// 0/1 Adam (DeepSpeed's ZeroOneAdam, arXiv 2202.06009): Adam without bias correction whose
  /// exp_avg_sq is updated, from all-reduced gradients, on steps ever further apart (every
  /// step at first; the interval doubles after each var_update_scaler such steps); between them
  /// the momentum takes the gradients through the 1-bit all-reduce. Past var_freeze_step
  /// exp_avg_sq is frozen and each rank steps on its own gradient, the ranks meeting every
  /// local_step_interval steps (1 at first, doubled every local_step_scaler steps up to
  /// local_step_clipper) to all-reduce, compressed, what they moved since they last met.
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
  /// 1-bit Lamb (DeepSpeed's OnebitLamb, arXiv 2104.06069): Lamb without bias correction until
  /// step freeze_step (max_coeff, min_coeff and freeze_step as above), keeping an average of
  /// its trust ratios (coeff_beta); after it exp_avg_sq is frozen and the momenta of all tensors
  /// go through one 1-bit all-reduce, each tensor's trust ratio the frozen average times a factor
  /// from exp_avg_sq_fresh (the variance of the reconstructed gradients), clamped to
  /// [factor_min, factor_max] and to within factor_threshold of the previous step's.
  double coeff_beta = 0.9;
  double factor_max = 4.0, factor_min = 0.5, factor_threshold = 0.1;

  /// Whether this optimizer keeps exp_avg (Adam's first moment, Lion's momentum) and exp_avg_sq
  /// (Adam's second moment; Adagrad's running sum of squared gradients, torch's "sum").
  /// Muon keeps exp_avg for every element (the matrices' momentum, the others' first moment) and
  /// exp_avg_sq for the elements AdamW steps only (aux_exp_avg_sq).
  /// Adafactor keeps exp_avg only with beta1, and exp_avg_sq for its 1-D tensors alone.
  bool has_exp_avg() const { return type != Type::kAdagrad && (type != Type::kAdafactor || adafactor_beta1); }
  bool has_exp_avg_sq() const { return type != Type::kLion; }
  /// Muon and Adafactor: exp_avg_sq exists for some tensors alone (keeps_exp_avg_sq), packed on
  /// the device.
  bool aux_exp_avg_sq() const { return type == Type::kMuon || type == Type::kAdafactor; }
  /// Adafactor: the matrices' second moments are row and column factors (AdafactorFactors).
  bool factored() const { return type == Type::kAdafactor; }
  /// OneBitAdam, ZeroOneAdam and OneBitLamb: momenta all-reduced through 1-bit compression
  /// (stage 0 only).
  bool onebit() const { return type == Type::kOneBitAdam || type == Type::kZeroOneAdam || type == Type::kOneBitLamb; }
  /// OneBitLamb keeps a third fp32 field, exp_avg_sq_fresh, from the end of its warm-up.
  bool has_exp_avg_sq_fresh() const { return type == Type::kOneBitLamb; }
  /// fp32 state elements per parameter beside the master weights, as ZeRO-Offload stores them
  /// (Adam and Lamb 2, Lion and Adagrad 1; Muon 1 for its matrices, 2 for the rest; Adafactor 0,
  /// or 1 with beta1: its 1-D tensors' exp_avg_sq lives apart, packed).
  int moment_count() const { return int(has_exp_avg()) + int(has_exp_avg_sq() && !factored()); }
};

/// DeepSpeed's name for an optimizer type ("AdamW", "Lion", ...), as configs and manifests spell it.
const char* optimizer_name(OptimizerConfig::Type type);

struct SchedulerConfig {
  /// kTrainer: the config has no scheduler section, so the trainer's --lr_scheduler_type applies,
  /// as HF Trainer creates its own scheduler then.
  enum class Type { kTrainer, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle, kLRRangeTest };
  Type type = Type::kTrainer;
  // kTrainer: HF's schedules (transformers.get_scheduler) over --warmup_steps and --max_steps.
  enum class TrainerType { kLinear, kCosine, kConstant, kConstantWithWarmup };
  /// Constant unless set: the parser sets it from --lr_scheduler_type (HF's default "linear").
  TrainerType trainer_type = TrainerType::kConstant;
  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  ///< unset: the optimizer's lr (WarmupLR; WarmupDecayLR's is 0.001)
  int64_t warmup_num_steps = 1000;
  bool warmup_type_log = true;  ///< "log" (default) or "linear"
  int64_t total_num_steps = 0;  ///< WarmupDecayLR, WarmupCosineLR (required)
  double warmup_min_ratio = 0.0, cos_min_ratio = 0.0001;
  // OneCycle
  double cycle_min_lr = 0, cycle_max_lr = 0, decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0;  ///< 0 means dynamic loss scaling
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

/// zero_optimization.offload_optimizer / offload_param. Defaults are DeepSpeed's.
struct OffloadConfig {
  enum class Device { kNone, kCpu, kNvme };
  Device device = Device::kNone;
  std::string nvme_path;     ///< a directory; required for nvme
  bool pin_memory = false;   ///< host buffers in the `pinned` pool (page-locked on a GPU)
  int64_t buffer_count = 4;  ///< offload_optimizer: 4 (DeepSpeed), offload_param: 5
  int64_t buffer_size = 100'000'000;   ///< offload_param: elements per NVMe read buffer
  int64_t max_in_cpu = 1'000'000'000;  ///< offload_param nvme: elements cached in host memory
  double ratio = 1.0;        ///< offload_optimizer cpu: the fraction of the optimizer state offloaded
  bool enabled() const { return device != Device::kNone; }
};

/// The top-level "aio" block: how NVMe swaps are issued.
struct AioConfig {
  int64_t block_size = 1'048'576;   ///< bytes per I/O request
  int64_t queue_depth = 8;          ///< requests in flight per submitting thread
  int64_t intra_op_parallelism = 1; ///< threads (each with its own ring) that split one transfer
  bool single_submit = false;       ///< one submit call per request instead of one per batch
  bool overlap_events = true;       ///< refill the queue as requests complete instead of in waves
};

/// The least "auto" gives reduce_bucket_size and allgather_bucket_size (elements; ds_config.cpp).
constexpr int64_t kMinAutoBucket = int64_t(1) << 20;

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool overlap_comm = false;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  int64_t reduce_bucket_size = 500'000'000;
  int64_t allgather_bucket_size = 500'000'000;
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;
  /// Stage 3: gather the full 16-bit model into model_states.h5 at every checkpoint.
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_optimizer, offload_param;
  /// Elements of optimizer state swapped (nvme) or stepped (cpu) as one piece.
  int64_t sub_group_size = 1'000'000'000;
  /// zerotrain's --delayed_param_update, not a DeepSpeed key (DeepSpeed ships no delayed update;
  /// the trainer and zero_estimate set it from their flags): the optimizer steps after this many
  /// run the offloaded part's CPU Adam beside the next step's forward and backward. -1: never.
  int64_t delayed_param_update_after = -1;
  /// ZeRO++ qwZ (stage 3): the parameters' all-gathers carry int8 values with a scale per block
  /// (zero/quantized_gather.h) instead of the training dtype.
  bool zero_quantized_weights = false;
  /// ZeRO++ hpZ (stage 3): a secondary copy of the parameters partitioned within groups of this
  /// many consecutive ranks (a node's), from which the gathers after a unit's first stay inside
  /// the group (ZeroPlan::hpz). 1: none.
  int64_t zero_hpz_partition_size = 1;
  /// ZeRO++ qgZ (stage 3): across more than one node, the gradients' reduce-scatters reduce inside
  /// each node and cross the nodes as int4 (zero/quantized_reduce.h).
  bool zero_quantized_gradients = false;
  /// MiCS (stage 3): parameters, gradients and optimizer states partitioned within groups of
  /// this many consecutive ranks, replicated across the groups; the gradients all-reduced across
  /// the replicas at the step (zero/mics_groups.h). -1 (or the world): none.
  int64_t mics_shard_size = -1;
  /// MiCS: a shard group that spans nodes gathers in two levels, across the nodes among the ranks
  /// of one local index, then inside each node (PartitionedParameterCoordinator). Needs
  /// mics_shard_size.
  bool mics_hierarchical_params_gather = false;
};

/// DeepSpeed's "tensorboard" and "csv_monitor" blocks: rank 0 writes the training scalars under
/// output_path/job_name, as DeepSpeed's monitors do. Defaults are DeepSpeed's.
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;                   ///< "" : relative to the working directory
  std::string job_name = "DeepSpeedJobName";
};

struct DsConfig {
  std::string source;  ///< the file it came from, for messages
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 1;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  double gradient_clipping = 0.0;  ///< 0 disables clipping
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  bool bf16 = false;
  /// bf16.check_grad_overflow (DeepSpeed 0.19's default true): skip a step whose gradient is not
  /// finite, as fp16 does; false: such a gradient ends the run with an error.
  bool bf16_check_grad_overflow = true;
  ZeroConfig zero;
  AioConfig aio;
  std::optional<DType> communication_data_type;
  /// data_types.grad_accum_dtype as given (null: DeepSpeed's default, see grad_dtype()).
  std::optional<DType> grad_accum_dtype;
  /// checkpoint.use_node_local_storage: each node writes its ranks' files to its own disk.
  bool checkpoint_node_local = false;
  MonitorConfig tensorboard, csv_monitor;
  /// One line per key that was accepted because its value changes nothing here (DeepSpeed's
  /// default, or a disabled feature); the trainer prints them once on rank 0.
  std::vector<std::string> notices;

  /// The dtype parameters and gradients are held in: fp16, bf16 or fp32.
  DType param_dtype() const { return fp16.enabled ? DType::kF16 : bf16 ? DType::kBF16 : DType::kF32; }
  /// The dtype gradients accumulate in: data_types.grad_accum_dtype, else DeepSpeed's default,
  /// fp32 for bf16 without ZeRO (stage 0: its BF16_Optimizer) and the parameters' dtype otherwise.
  DType grad_dtype() const {
    if (grad_accum_dtype) return *grad_accum_dtype;
    return bf16 && zero.stage == 0 ? DType::kF32 : param_dtype();
  }
  /// Whether grad_dtype() is one the engine runs: the parameters' dtype, or fp32 with bf16 where
  /// DeepSpeed runs its BF16_Optimizer (stage 0, and stage 1 without offload_optimizer).
  bool grad_dtype_supported() const {
    const DType g = grad_dtype();
    return g == param_dtype() ||
           (bf16 && g == DType::kF32 && (zero.stage == 0 || (zero.stage == 1 && !zero.offload_optimizer.enabled())));
  }
};

/// A trainer flag that can fill an "auto" value, and whether the user gave it explicitly (an
/// explicit flag that disagrees with an explicit config value is an error, as in HF Trainer).
template <typename T>
struct AutoValue {
  T value{};
  bool explicit_flag = false;
};

/// What "auto" resolves to: HF Trainer's flags plus the world size and the model's hidden size.
struct AutoValues {
  int world_size = 1;
  int64_t hidden_size = 0;  ///< n_embd; used for the bucket-size keys
  AutoValue<int64_t> micro_batch{8};
  AutoValue<int64_t> grad_accum{1};
  AutoValue<double> learning_rate{5e-5};
  AutoValue<double> adam_beta1{0.9}, adam_beta2{0.999}, adam_epsilon{1e-8};
  AutoValue<double> weight_decay{0.0};
  AutoValue<double> max_grad_norm{1.0};
  AutoValue<int64_t> warmup_steps{0};
  AutoValue<int64_t> max_steps{0};
  AutoValue<bool> fp16{false}, bf16{false};
  AutoValue<std::string> lr_scheduler_type{"linear"};
  /// HF's --optim: the optimizer when the config has none (adamw_torch, lion_32bit, adagrad, adafactor).
  AutoValue<std::string> optim{"adamw_torch"};
  /// HF's --optim_args ("key=value,..."): Adafactor's keyword arguments with --optim adafactor.
  AutoValue<std::string> optim_args{""};
};

/// Parses and validates a DeepSpeed config. `source` names the file in messages. Throws
/// UsageError for every problem, naming the key path ("zero_optimization.stage").
DsConfig parse_ds_config(const boost::json::value& json, const std::string& source,
                         const AutoValues& autos);

/// Reads the file and parses it.
DsConfig load_ds_config(const std::string& path, const AutoValues& autos);

}  // namespace zt
