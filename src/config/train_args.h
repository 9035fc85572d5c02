// The trainer's command line. Flags keep HF Trainer's names so that users' launch scripts carry
// over; `explicit_flags` records which were given, for the "auto" mismatch checks.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/ds_config.h"

namespace zt {

struct TrainArgs {
  std::string deepspeed;             ///< path of the ds_config.json
  std::string config_name;           ///< HF GPT-2 config.json
  std::string model_name_or_path;    ///< a directory with config.json (+ model.safetensors)
  std::string train_data, eval_data; ///< globs of token shards
  std::string output_dir;
  bool overwrite_output_dir = false;
  int64_t max_steps = 0;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  int64_t warmup_steps = 0;
  std::string lr_scheduler_type = "linear";  ///< used when the DeepSpeed config has no scheduler
  std::string optim = "adamw_torch";         ///< HF's --optim, used when the DeepSpeed config has no optimizer
  std::string optim_args;                    ///< HF's --optim_args: Adafactor's keyword arguments
  double weight_decay = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;
  bool bf16 = false, fp16 = false;
  bool tf32 = false;  ///< fp32 GEMMs on TF32 tensor cores (HF's --tf32)
  int64_t save_steps = 0;
  /// HF's --save_strategy: "steps" saves every --save_steps (when > 0) and at the end of
  /// training; "no" saves nothing, not even on SIGINT/SIGTERM.
  std::string save_strategy = "steps";
  int64_t save_total_limit = 0;  ///< keep the N newest checkpoints (0: all)
  int64_t logging_steps = 1;
  uint64_t seed = 42;
  std::string resume_from_checkpoint;
  int64_t block_size = 0;  ///< 0: n_positions
  bool do_eval = false;
  int64_t eval_steps = 0;  ///< 0: only at the end (with --do_eval)
  bool eval_on_start = false;  ///< evaluate once before the first step
  int64_t max_eval_samples = 0;  ///< 0: every window of the eval data
  bool gradient_checkpointing = false;
  /// What the model computes with: "auto" (bf16 in a bf16 run on a GPU or a CPU with bf16 GEMM
  /// instructions, else fp32), "fp32", "bf16".
  std::string activation_dtype = "auto";
  /// The lm_head and loss over at most this many tokens at a time: "auto", "0" (all) or a count.
  std::string classifier_chunk_tokens = "auto";
  /// ZeRO-Offload's delayed parameter update: past the warm-up steps, the offloaded part's CPU
  /// Adam of step t runs beside step t+1's forward and backward, which see the model of step t-1.
  bool delayed_param_update = false;
  int64_t delayed_param_update_warmup = 40;  ///< steps run undelayed first
  bool disable_tqdm = false;  ///< no live progress line
  int64_t profile_steps = 0;  ///< the self-profile: time per op class over N steps after the first (0: off)
  std::string accelerator = "auto";  ///< auto, cpu, emulated, cuda (backend/accelerator.h)
  std::set<std::string> explicit_flags;

  bool given(const std::string& flag) const { return explicit_flags.count(flag) > 0; }
  /// The values that "auto" in the DeepSpeed config resolves to.
  AutoValues auto_values(int world_size, int64_t hidden_size) const;
};

/// Parses argv. Returns std::nullopt after printing --help or --version. Throws UsageError on a bad flag,
/// naming it (and the closest known flag for a misspelling).
std::optional<TrainArgs> parse_train_args(int argc, const char* const* argv);

/// What --activation_dtype resolves to ("auto", "fp32" or "bf16") for a run training in
/// `param_dtype` on a device with bf16 GEMM instructions or not (Backend::native_bf16_gemm): auto
/// is bf16 in a bf16 run there (a GPU; a CPU with AVX512-BF16 or AMX, whether its bf16 GEMMs then
/// run in oneDNN on the operands as they lie or, where that is slower, as fp32 GEMMs on widened
/// operands: half the activations' memory either way, and faster at long sequences) and fp32
/// elsewhere (on an AVX2-only CPU the bf16 kernels widen every op and nothing is faster).
/// bf16 with fp16 training is a UsageError.
DType resolve_activation_dtype(const std::string& choice, DType param_dtype, bool native_bf16_gemm);

/// --classifier_chunk_tokens as a number: -1 for "auto" (model_memory.h's kClassifierChunkAuto),
/// else the count (0: the whole batch at once). Anything else is a UsageError naming the flag.
int parse_classifier_chunk(const std::string& text);

/// Parses "true"/"false"/"1"/"0"/"yes"/"no" (any case), as HF's argument parser does.
bool parse_bool_flag(const std::string& flag, const std::string& text);

}  // namespace zt
