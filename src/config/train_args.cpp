#include "config/train_args.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <iostream>
#include <set>
#include <utility>

#include "config/json_section.h"
#include "core/build_info.h"
#include "core/error.h"

namespace po = boost::program_options;

namespace zt {

bool parse_bool_flag(const std::string& flag, const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (lower == "false" || lower == "0" || lower == "no") return false;
  throw UsageError(cat("--", flag, ": expected true or false, got '", text, "'"));
}

AutoValues TrainArgs::auto_values(int world_size, int64_t hidden_size) const {
  AutoValues a;
  a.world_size = world_size;
  a.hidden_size = hidden_size;
  a.micro_batch = {per_device_train_batch_size, given("per_device_train_batch_size")};
  a.grad_accum = {gradient_accumulation_steps, given("gradient_accumulation_steps")};
  a.learning_rate = {learning_rate, given("learning_rate")};
  a.adam_beta1 = {adam_beta1, given("adam_beta1")};
  a.adam_beta2 = {adam_beta2, given("adam_beta2")};
  a.adam_epsilon = {adam_epsilon, given("adam_epsilon")};
  a.weight_decay = {weight_decay, given("weight_decay")};
  a.max_grad_norm = {max_grad_norm, given("max_grad_norm")};
  a.warmup_steps = {warmup_steps, given("warmup_steps")};
  a.max_steps = {max_steps, given("max_steps")};
  a.fp16 = {fp16, given("fp16")};
  a.bf16 = {bf16, given("bf16")};
  a.lr_scheduler_type = {lr_scheduler_type, given("lr_scheduler_type")};
  a.optim = {optim, given("optim")};
  a.optim_args = {optim_args, given("optim_args")};
  return a;
}

DType resolve_activation_dtype(const std::string& choice, DType param_dtype, bool native_bf16_gemm) {
  if (choice == "fp32") return DType::kF32;
  if (choice == "bf16") {
    ZT_USAGE_CHECK(param_dtype != DType::kF16,
                   "--activation_dtype bf16 with fp16 training is not implemented: train in bf16 or fp32");
    return DType::kBF16;
  }
  ZT_USAGE_CHECK(choice == "auto", "--activation_dtype must be auto, fp32 or bf16, got '", choice, "'");
  return param_dtype == DType::kBF16 && native_bf16_gemm ? DType::kBF16 : DType::kF32;
}

int parse_classifier_chunk(const std::string& text) {
  if (text == "auto") return -1;
  size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZT_USAGE_CHECK(used == text.size() && !text.empty() && n >= 0 && n <= INT32_MAX,
                 "--classifier_chunk_tokens must be auto, 0 (the whole batch at once) or a number of tokens, got '",
                 text, "'");
  return int(n);
}

std::optional<TrainArgs> parse_train_args(int argc, const char* const* argv) {
  TrainArgs a;
  std::string bf16 = "false", fp16 = "false", overwrite = "false", do_eval = "false";
  std::string checkpointing = "false", disable_tqdm = "false", eval_on_start = "false", tf32 = "false",
              delayed_update = "false";
  int64_t local_rank = -1;
  po::options_description opts("zerotrain options (HF Trainer names)");
  auto flag = [](std::string& target) {  // --flag, --flag=true, --flag=false
    return po::value<std::string>(&target)->implicit_value("true");
  };
  opts.add_options()
    ("help,h", "print this help")
    ("version", "print the version, the git commit and the build, then exit")
    ("deepspeed", po::value(&a.deepspeed), "DeepSpeed config JSON (ds_config.json)")
    ("config_name", po::value(&a.config_name), "HF GPT-2 config.json giving the model shape")
    ("model_name_or_path", po::value(&a.model_name_or_path), "directory with config.json (and model.safetensors)")
    ("train_data", po::value(&a.train_data), "glob of training token shards (llm.c format)")
    ("eval_data", po::value(&a.eval_data), "glob of evaluation token shards")
    ("output_dir", po::value(&a.output_dir), "where metrics.jsonl and checkpoints go")
    ("overwrite_output_dir", flag(overwrite), "allow a non-empty output_dir")
    ("max_steps", po::value(&a.max_steps), "optimizer steps to train")
    ("per_device_train_batch_size", po::value(&a.per_device_train_batch_size), "micro batch per rank (default 8)")
    ("per_device_eval_batch_size", po::value(&a.per_device_eval_batch_size), "eval batch per rank (default 8)")
    ("gradient_accumulation_steps", po::value(&a.gradient_accumulation_steps), "micro steps per optimizer step (default 1)")
    ("learning_rate", po::value(&a.learning_rate), "peak learning rate (default 5e-5)")
    ("warmup_steps", po::value(&a.warmup_steps), "scheduler warmup steps (default 0)")
    ("lr_scheduler_type", po::value(&a.lr_scheduler_type),
     "without a scheduler in the config: linear (default), cosine, constant, constant_with_warmup")
    ("weight_decay", po::value(&a.weight_decay), "weight decay (default 0)")
    ("optim", po::value(&a.optim),
     "without an optimizer in the config: adamw_torch (default; also adamw_torch_fused, adamw_hf, "
     "adamw_apex_fused), lion_32bit (Lion, betas from --adam_beta1/2), adagrad (eps 1e-10) or adafactor "
     "(transformers' Adafactor as HF's Trainer builds it: lr from --learning_rate, no relative step)")
    ("optim_args", po::value(&a.optim_args),
     "with --optim adafactor: transformers' Adafactor arguments as \"key=value,...\": scale_parameter, "
     "relative_step, warmup_init (True/False), clip_threshold, decay_rate, beta1 (a number or None)")
    ("adam_beta1", po::value(&a.adam_beta1), "Adam beta1 (default 0.9)")
    ("adam_beta2", po::value(&a.adam_beta2), "Adam beta2 (default 0.999)")
    ("adam_epsilon", po::value(&a.adam_epsilon), "Adam epsilon (default 1e-8)")
    ("max_grad_norm", po::value(&a.max_grad_norm), "global-norm clipping threshold (default 1.0, 0 disables)")
    ("bf16", flag(bf16), "train in bf16 with fp32 master weights")
    ("fp16", flag(fp16), "train in fp16 with fp32 master weights and loss scaling")
    ("tf32", flag(tf32), "fp32 GEMMs on TF32 tensor cores (a GPU, Ampere or newer); off: exact fp32")
    ("save_steps", po::value(&a.save_steps), "checkpoint every N steps (and always at the end)")
    ("save_strategy", po::value(&a.save_strategy), "steps (default: every --save_steps and at the end) or no")
    ("save_total_limit", po::value(&a.save_total_limit), "keep only the N newest checkpoints (default: all)")
    ("logging_steps", po::value(&a.logging_steps), "write a metrics.jsonl step line every N steps (default 1)")
    ("seed", po::value(&a.seed), "seed for initialisation and data order (default 42)")
    ("resume_from_checkpoint", po::value(&a.resume_from_checkpoint), "checkpoint directory, or auto")
    ("block_size", po::value(&a.block_size), "sequence length (default: the model's positions, at most 1024)")
    ("do_eval", flag(do_eval), "evaluate (at --eval_steps and at the end)")
    ("eval_steps", po::value(&a.eval_steps), "evaluate every N steps")
    ("eval_on_start", flag(eval_on_start), "evaluate once before training starts")
    ("max_eval_samples", po::value(&a.max_eval_samples), "evaluate on the first N windows only")
    ("gradient_checkpointing", flag(checkpointing), "recompute each block's activations in backward")
    ("activation_dtype", po::value(&a.activation_dtype),
     "auto (default: bf16 in a bf16 run on a GPU or a CPU with AVX512-BF16 or AMX, else fp32), fp32, or bf16 (a "
     "bf16 model: activations and GEMMs in bf16, fp32 statistics and gradients)")
    ("classifier_chunk_tokens", po::value(&a.classifier_chunk_tokens),
     "run the lm_head and the loss over at most N tokens at a time, each chunk's backward straight after it, so "
     "that only one chunk's logits are held (a 128K vocabulary's logits are 256 KB a token in bf16): auto "
     "(default: chunks when the whole batch's logits would pass 1 GiB), 0 (never), or N")
    ("delayed_param_update", flag(delayed_update),
     "ZeRO-Offload's delayed parameter update (needs offload_optimizer): after the warm-up, the CPU optimizer step of "
     "step t runs while step t+1's forward and backward run on the model of step t-1, so that a GPU does not "
     "wait for the CPU; checkpoints, evaluations and the end of the run see every update")
    ("delayed_param_update_warmup", po::value(&a.delayed_param_update_warmup),
     "optimizer steps run undelayed before --delayed_param_update starts (default 40)")
    ("disable_tqdm", flag(disable_tqdm), "no live progress line")
    ("profile_steps", po::value(&a.profile_steps),
     "time N steps after the first (a warm-up) by op class with the backend's events (CUDA events on a GPU), then "
     "print a table and write a profile line to metrics.jsonl (default 0: off). gemm, attention, norm, classifier "
     "(the lm_head's GEMMs, softmax, cross-entropy), elementwise (gelu, swiglu, residual, rotary, embedding): the kernels' time on the "
     "compute stream; optimizer: the engine's step there, less its collective waits; communication: the compute "
     "stream held up waiting for collectives (overlapped ones cost nothing); host gaps: the rest of the step's "
     "wall time (host work, launch gaps, copies and casts outside the kernels and the engine's step)")
    ("accelerator", po::value(&a.accelerator),
     "auto (default: cuda when a GPU is visible, else cpu), cpu, emulated (the CPU behind a device's "
     "contract, checked), cuda")
    ("local_rank", po::value(&local_rank), "accepted for DeepSpeed-launcher compatibility; ranks come from MPI");

  po::variables_map vm;
  try {
    po::parsed_options parsed = po::command_line_parser(argc, argv).options(opts).style(
        po::command_line_style::unix_style ^ po::command_line_style::allow_guessing).run();
    // A flag given twice takes its last value, as HF's argument parser (argparse) does; launch
    // scripts append overrides to a base command line.
    std::vector<po::option> last_wins;
    std::set<std::string> seen;
    for (auto it = parsed.options.rbegin(); it != parsed.options.rend(); ++it) {
      if (seen.insert(it->string_key).second) last_wins.insert(last_wins.begin(), *it);
    }
    parsed.options = std::move(last_wins);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    while (!name.empty() && name[0] == '-') name.erase(0, 1);
    std::vector<std::string> known;
    for (const auto& o : opts.options()) known.push_back(o->long_name());
    throw UsageError(cat("unknown flag --", name, "; did you mean --", closest_key(name, known), "?"));
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: zerotrain --deepspeed CONFIG --config_name MODEL.json --train_data GLOB "
                 "[--eval_data GLOB] --output_dir DIR --max_steps N [...]\n\n" << opts << "\n";
    return std::nullopt;
  }
  if (vm.count("version")) {
    std::cout << version_text("zerotrain");
    return std::nullopt;
  }
  for (const auto& [name, value] : vm) {
    if (!value.defaulted()) a.explicit_flags.insert(name);
  }
  a.bf16 = parse_bool_flag("bf16", bf16);
  a.fp16 = parse_bool_flag("fp16", fp16);
  a.overwrite_output_dir = parse_bool_flag("overwrite_output_dir", overwrite);
  a.do_eval = parse_bool_flag("do_eval", do_eval);
  a.gradient_checkpointing = parse_bool_flag("gradient_checkpointing", checkpointing);
  a.disable_tqdm = parse_bool_flag("disable_tqdm", disable_tqdm);
  a.eval_on_start = parse_bool_flag("eval_on_start", eval_on_start);
  a.tf32 = parse_bool_flag("tf32", tf32);
  a.delayed_param_update = parse_bool_flag("delayed_param_update", delayed_update);

  ZT_USAGE_CHECK(!a.deepspeed.empty(), "--deepspeed CONFIG is required");
  ZT_USAGE_CHECK(!a.config_name.empty() || !a.model_name_or_path.empty(),
                 "--config_name MODEL.json or --model_name_or_path DIR is required");
  ZT_USAGE_CHECK(!a.output_dir.empty(), "--output_dir is required");
  ZT_USAGE_CHECK(!a.train_data.empty() || a.do_eval, "--train_data GLOB is required to train");
  ZT_USAGE_CHECK(a.max_steps >= 0, "--max_steps must be >= 0, got ", a.max_steps);
  ZT_USAGE_CHECK(a.max_steps > 0 || a.do_eval, "--max_steps N (N > 0) is required to train (or --do_eval alone to evaluate)");
  // Counts the model holds in 32-bit ints (the config's keys have the same bounds).
  for (auto [flag, value] : {std::pair{"per_device_train_batch_size", a.per_device_train_batch_size},
                             std::pair{"per_device_eval_batch_size", a.per_device_eval_batch_size},
                             std::pair{"gradient_accumulation_steps", a.gradient_accumulation_steps}}) {
    ZT_USAGE_CHECK(value >= 1 && value <= INT32_MAX, "--", flag, " must be in [1, ", INT32_MAX, "], got ", value);
  }
  // The ranges the config's keys have (optimizer.params, gradient_clipping), so that a value is
  // held to the same rule whether it comes from the config or, through "auto", from a flag.
  for (const auto& [name, value] : {std::pair<const char*, double>{"learning_rate", a.learning_rate},
                                    {"weight_decay", a.weight_decay},
                                    {"adam_beta1", a.adam_beta1},
                                    {"adam_beta2", a.adam_beta2},
                                    {"adam_epsilon", a.adam_epsilon},
                                    {"max_grad_norm", a.max_grad_norm}}) {
    ZT_USAGE_CHECK(std::isfinite(value), "--", name, " must be a finite number, got ", value);
    ZT_USAGE_CHECK(value >= 0, "--", name, " must be >= 0, got ", value);
  }
  ZT_USAGE_CHECK(a.adam_beta1 < 1 && a.adam_beta2 < 1, "--adam_beta1 and --adam_beta2 must be below 1, got ",
                 a.adam_beta1, " and ", a.adam_beta2);
  ZT_USAGE_CHECK(a.warmup_steps >= 0, "--warmup_steps must be >= 0");
  ZT_USAGE_CHECK(a.logging_steps >= 1, "--logging_steps must be >= 1");
  ZT_USAGE_CHECK(a.save_steps >= 0, "--save_steps must be >= 0");
  ZT_USAGE_CHECK(a.save_strategy == "steps" || a.save_strategy == "no", "--save_strategy '", a.save_strategy,
                 "' is not implemented: \"steps\" (every --save_steps and at the end) or \"no\"",
                 a.save_strategy == "epoch" ? " (zerotrain counts steps, not epochs)" : "");
  ZT_USAGE_CHECK(a.save_strategy == "steps" || (!a.given("save_steps") && !a.given("save_total_limit")),
                 "--save_strategy no saves nothing; drop --save_steps/--save_total_limit or the strategy");
  ZT_USAGE_CHECK(a.save_total_limit >= 0, "--save_total_limit must be >= 1 (or 0 for all), got ", a.save_total_limit);
  ZT_USAGE_CHECK(a.eval_steps >= 0, "--eval_steps must be >= 0");
  ZT_USAGE_CHECK(a.delayed_param_update_warmup >= 0, "--delayed_param_update_warmup must be >= 0, got ",
                 a.delayed_param_update_warmup);
  ZT_USAGE_CHECK(a.delayed_param_update || !a.given("delayed_param_update_warmup"),
                 "--delayed_param_update_warmup does nothing without --delayed_param_update");
  ZT_USAGE_CHECK(a.profile_steps >= 0, "--profile_steps must be >= 0 (0: no profile), got ", a.profile_steps);
  ZT_USAGE_CHECK(a.max_eval_samples >= 0, "--max_eval_samples must be >= 0");
  ZT_USAGE_CHECK(a.block_size >= 0 && a.block_size <= INT32_MAX, "--block_size must be in [0, ", INT32_MAX, "], got ",
                 a.block_size);
  ZT_USAGE_CHECK(!(a.bf16 && a.fp16), "--bf16 and --fp16 are exclusive");
  resolve_activation_dtype(a.activation_dtype, DType::kF32, false);  // only checks the word
  parse_classifier_chunk(a.classifier_chunk_tokens);
  ZT_USAGE_CHECK(!a.do_eval || !a.eval_data.empty(), "--do_eval needs --eval_data GLOB");
  ZT_USAGE_CHECK(!a.eval_on_start || !a.eval_data.empty(), "--eval_on_start needs --eval_data GLOB");
  return a;
}

}  // namespace zt
