#include "config/ds_config.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "core/error.h"
#include "core/log.h"

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

// Adam switches of DeepSpeed's FusedAdam / DeepSpeedCPUAdam / torch.optim that select nothing
// here. The torch.optim-only ones are refused: DeepSpeed passes them only with torch_adam.
void neutral_adam_params(JsonSection& p) {
  p.neutral("amsgrad", {false}, "zerotrain's Adam has no AMSGrad variant, DeepSpeed's default");
  p.neutral("torch_adam", {false}, "zerotrain steps with its own fused Adam, DeepSpeed's default");
  p.neutral("fp32_optimizer_states", {true}, "Adam moments are always fp32, DeepSpeed's default");
  p.neutral("set_grad_none", {true, false}, "it only chooses how FusedAdam clears gradients; the math is the same");
  p.neutral("max_grad_norm", {}, "DeepSpeed refuses it too; use gradient_clipping");
  p.not_implemented({"fused", "foreach", "capturable", "maximize", "differentiable"},
                    "torch.optim switches, which DeepSpeed passes only with torch_adam: true");
}

// HF Trainer's --optim names (transformers' OptimizerNames) that zerotrain runs, and the
// optimizer.type each means. HF builds them with the Adam flags' betas (Lion included) and eps.
std::optional<OptimizerConfig::Type> hf_optim_type(const std::string& name) {
  using T = OptimizerConfig::Type;
  static const std::vector<std::pair<std::string, T>> kNames = {
      {"adamw_torch", T::kAdamW}, {"adamw_torch_fused", T::kAdamW}, {"adamw_hf", T::kAdamW},
      {"adamw_apex_fused", T::kAdamW}, {"lion_32bit", T::kLion}, {"adagrad", T::kAdagrad},
      {"adafactor", T::kAdafactor}};
  for (const auto& [n, t] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

OptimizerConfig::Type optim_flag_type(const AutoValues& autos) {
  const std::string& name = autos.optim.value;
  if (auto t = hf_optim_type(name)) return *t;
  static const char* kHfOptims[] = {"sgd", "rmsprop", "lion_8bit", "paged_lion_32bit", "paged_lion_8bit",
                                    "adamw_8bit", "adamw_bnb_8bit", "paged_adamw_32bit", "paged_adamw_8bit",
                                    "adamw_anyprecision", "adamw_torch_xla", "adamw_torch_npu_fused", "galore_adamw",
                                    "lomo", "adalomo", "grokadamw", "schedule_free_adamw", "schedule_free_sgd",
                                    "ademamix", "rmsprop_bnb", "muon"};
  for (const char* known : kHfOptims) {
    if (name == known) {
      throw UsageError(cat("--optim ", name, " is not implemented by zerotrain (adamw_torch, adamw_torch_fused, "
                           "adamw_hf, adamw_apex_fused, lion_32bit, adagrad and adafactor are)"));
    }
  }
  throw UsageError(cat("--optim: unknown optimizer '", name, "'; did you mean '",
                       closest_key(name, {"adamw_torch", "lion_32bit", "adagrad", "adafactor"}), "'?"));
}

// "betas" of Adam, Lion and Lamb: "auto" and absent follow --adam_beta1/--adam_beta2 (DeepSpeed's
// defaults for all three, (0.9, 0.999), are HF's).
void read_betas(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  if (p.is_auto("betas")) {
    p.mark_read("betas");
    return;
  }
  std::vector<double> betas;
  if (!p.read_numbers("betas", betas, 2)) return;
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

void parse_adam_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_betas(p, o, autos);
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  p.read("adam_w_mode", o.adam_w_mode);
  p.read("bias_correction", o.bias_correction);
  neutral_adam_params(p);
}

// DeepSpeed's Lion block: FusedLion, or DeepSpeedCPULion with offload_optimizer.
void parse_lion_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_betas(p, o, autos);
  p.neutral("fp32_optimizer_states", {true}, "Lion's momentum is always fp32, DeepSpeed's default");
  p.neutral("set_grad_none", {true, false}, "it only chooses how FusedLion clears gradients; the math is the same");
  p.neutral("max_grad_norm", {}, "DeepSpeed refuses it too; use gradient_clipping");
}

// DeepSpeed's Adagrad block: torch.optim.Adagrad, or DeepSpeedCPUAdagrad with offload_optimizer.
void parse_adagrad_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  o.eps = 1e-10;  // torch's and DeepSpeed's default; "auto" follows --adam_epsilon, as HF fills it
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  p.read("lr_decay", o.lr_decay, 0.0);
  p.neutral("initial_accumulator_value", {0}, "the running sum of squares starts at zero, torch's default");
  p.neutral("amsgrad", {false}, "DeepSpeedCPUAdagrad ignores it; Adagrad has no AMSGrad variant");
  p.neutral("fp32_optimizer_states", {true}, "the running sum of squares is always fp32, DeepSpeed's default");
  p.neutral("max_grad_norm", {}, "DeepSpeed refuses it too; use gradient_clipping");
  p.not_implemented({"fused", "foreach", "maximize", "differentiable"}, "torch.optim switches");
}

// Lamb's clamp of the trust ratio, FusedLamb's and OnebitLamb's keys alike.
void read_trust_ratio_clamp(JsonSection& p, OptimizerConfig& o) {
  p.read("max_coeff", o.max_coeff, 0.0);
  p.read("min_coeff", o.min_coeff, 0.0);
  if (o.min_coeff > o.max_coeff) {
    p.fail("min_coeff", cat(o.min_coeff, " is above max_coeff (", o.max_coeff, "): the trust ratio's clamp is empty"));
  }
}

// DeepSpeed's Lamb block: FusedLamb's keys. Its trust ratios are per tensor here, as FusedLamb
// computes them without ZeRO (under ZeRO DeepSpeed hands it flat partitions, whose ratios are
// not the paper's; it asks for zero_allow_untested_optimizer there).
void parse_lamb_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_betas(p, o, autos);
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  p.read("bias_correction", o.bias_correction);
  p.read("eps_inside_sqrt", o.eps_inside_sqrt);
  read_trust_ratio_clamp(p, o);
  p.neutral("amsgrad", {false}, "FusedLamb raises for it; Lamb has no AMSGrad variant");
  p.neutral("max_grad_norm", {}, "DeepSpeed refuses it too; use gradient_clipping");
}

// The keyword arguments DeepSpeed's 1-bit optimizers (deepspeed/runtime/fp16/onebit/, which
// DeepSpeed 0.19.6 builds and 0.19.8 no longer has) share; `name` is the class that takes them.
void read_onebit_common(JsonSection& p, OptimizerConfig& o, const AutoValues& autos, const std::string& name) {
  read_betas(p, o, autos);
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  o.bias_correction = false;
  p.neutral("bias_correction", {true, false}, name + " takes it and never applies it: its steps are not bias-corrected");
  p.neutral("eps_inside_sqrt", {true, false}, name + " takes it and never reads it: eps is added to sqrt(exp_avg_sq)");
  p.neutral("cuda_aware", {true, false},
            "it picks a CUDA-aware MPI in DeepSpeed's mpi backend; zerotrain's data communicator moves device "
            "buffers itself");
  p.neutral("comm_backend_name", {"nccl", "mpi", "hccl", "compressed"},
            "DeepSpeed's transports for the compressed all-reduce; zerotrain's is its data communicator (NCCL on GPUs, "
            "MPI or shared memory on the CPU)");
  p.neutral("amsgrad", {false}, name + " raises for it: the 1-bit optimizers have no AMSGrad variant");
  p.neutral("max_grad_norm", {}, "DeepSpeed refuses it too; use gradient_clipping");
}

// DeepSpeed's OneBitAdam block (onebit/adam.py's OnebitAdam).
void parse_onebit_adam_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_onebit_common(p, o, autos, "OnebitAdam");
  p.read("freeze_step", o.freeze_step, int64_t(0));
}

// DeepSpeed's ZeroOneAdam block (onebit/zoadam.py). Its intervals are counts of steps that
// DeepSpeed divides by (step % interval): 0 or less is out of range.
void parse_zero_one_adam_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_onebit_common(p, o, autos, "ZeroOneAdam");
  p.read("var_freeze_step", o.var_freeze_step, int64_t(0));
  p.read("var_update_scaler", o.var_update_scaler, int64_t(1));
  p.read("local_step_scaler", o.local_step_scaler, int64_t(1));
  p.read("local_step_clipper", o.local_step_clipper, int64_t(1));
}

// DeepSpeed's OneBitLamb block (onebit/lamb.py's OnebitLamb): the 1-bit keys, Lamb's clamp of the
// trust ratio, and the frozen ratio's factor. DeepSpeed checks none of the ranges; these are the
// ones its arithmetic needs (an average with weight in [0, 1), a clamp that is not empty).
void parse_onebit_lamb_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  read_onebit_common(p, o, autos, "OnebitLamb");
  p.read("freeze_step", o.freeze_step, int64_t(0));
  read_trust_ratio_clamp(p, o);
  p.read("coeff_beta", o.coeff_beta, 0.0, 1.0);
  if (o.coeff_beta >= 1) p.fail("coeff_beta", "must be below 1: the frozen trust ratio would never leave 0");
  p.read("factor_max", o.factor_max, 0.0);
  p.read("factor_min", o.factor_min, 0.0);
  if (o.factor_min > o.factor_max) {
    p.fail("factor_min", cat(o.factor_min, " is above factor_max (", o.factor_max, "): the factor's clamp is empty"));
  }
  p.read("factor_threshold", o.factor_threshold, 0.0);
}

// DeepSpeed's Muon block (MuonWithAuxAdam): its engine hands "lr", "momentum", "weight_decay",
// "muon_lr" and "ns_method" to the matrices' group and "lr", "betas", "eps", "weight_decay" and
// "adam_lr" to the AdamW group, each group with its own defaults where a key is absent (lr 0.02
// and 3e-4, betas (0.9, 0.95), eps 1e-10). muon_lr and adam_lr win over lr.
void parse_muon_params(JsonSection& p, OptimizerConfig& o, const AutoValues& autos) {
  const bool has_lr = p.has("lr");
  read_auto(p, "lr", o.lr, autos.learning_rate, "--learning_rate", 0.0);
  o.muon_lr = has_lr ? o.lr : 0.02;
  o.adam_lr = has_lr ? o.lr : 3e-4;
  p.read("muon_lr", o.muon_lr, 0.0);
  p.read("adam_lr", o.adam_lr, 0.0);
  // The schedule drives lr; both groups follow it in proportion (lr is the matrices' when absent).
  if (!has_lr) o.lr = o.muon_lr;
  if (o.lr == 0 && (o.muon_lr != 0 || o.adam_lr != 0)) {  // without lr, lr is muon_lr
    p.fail(has_lr ? "lr" : "muon_lr", cat("0 while ", has_lr ? "muon_lr or " : "",
                                          "adam_lr is not: the schedule scales both rates in proportion to lr"));
  }
  p.read("momentum", o.momentum, 0.0);
  if (o.momentum >= 1) p.fail("momentum", cat("must be in [0, 1), got ", o.momentum));
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  if (p.is_auto("betas")) {
    o.beta1 = autos.adam_beta1.value;
    o.beta2 = autos.adam_beta2.value;
  }
  read_betas(p, o, autos);
  o.eps = 1e-10;
  read_auto(p, "eps", o.eps, autos.adam_epsilon, "--adam_epsilon", 0.0);
  std::string method = "gram";
  p.read("ns_method", method);
  if (method == "gram") {
    o.ns_method = OptimizerConfig::NsMethod::kGram;
  } else if (method == "standard") {
    o.ns_method = OptimizerConfig::NsMethod::kStandard;
  } else {
    p.fail("ns_method", cat("'", one_line(method), "' is not a Newton-Schulz method (gram or standard)"));
  }
}

// DeepSpeed's "Adafactor": DeepSpeed has no Adafactor of its own and builds torch.optim.Adafactor
// from the block's params, so the keys are torch's: beta2_decay, eps [eps1 or null, eps2], d and
// weight_decay (decoupled: w (1 - lr wd)). torch's rule always steps relatively, min(lr, 1/sqrt(t)),
// scaled by max(eps2, RMS(w)), and clamps the estimate at eps1^2 (null: float32's epsilon).
void parse_torch_adafactor_params(JsonSection& p, OptimizerConfig& o) {
  o.adafactor_torch = true;
  o.relative_step = o.scale_parameter = true;
  o.adafactor_eps1 = 1.1920928955078125e-07;  // torch.finfo(torch.float32).eps
  p.read("beta2_decay", o.decay_rate, std::nullopt, 0.0);
  if (const boost::json::value* eps = p.raw("eps"); eps && !eps->is_null()) {
    const bool pair = eps->is_array() && eps->get_array().size() == 2 &&
                      (eps->get_array()[0].is_null() || eps->get_array()[0].is_number()) &&
                      eps->get_array()[1].is_number();
    if (!pair) p.fail("eps", "expected [eps1, eps2] (eps1 may be null), torch.optim.Adafactor's pair");
    const auto& a = eps->get_array();
    if (!a[0].is_null()) o.adafactor_eps1 = a[0].to_number<double>();
    o.adafactor_eps2 = a[1].to_number<double>();
    if (o.adafactor_eps1 < 0 || o.adafactor_eps2 < 0) {
      p.fail("eps", cat("each epsilon must be >= 0, got [", o.adafactor_eps1, ", ", o.adafactor_eps2, "]"));
    }
  }
  p.read("d", o.clip_threshold, 1.0);
  p.neutral("foreach", {true, false}, "it only chooses how torch batches its kernels; the math is the same");
  p.neutral("maximize", {false}, "zerotrain minimises the loss, torch's default");
}

// HF's --optim adafactor: transformers' Adafactor as HF Trainer builds it (lr from
// --learning_rate, scale_parameter and relative_step false), with --optim_args "key=value,..."
// giving its other keyword arguments (HF's Trainer passes none of them to Adafactor).
void hf_adafactor(OptimizerConfig& o, const AutoValues& autos) {
  o.adafactor_torch = false;
  o.scale_parameter = o.relative_step = o.warmup_init = false;
  const std::string& text = autos.optim_args.value;
  std::vector<std::string> seen;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    at = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    static const std::vector<std::string> kKeys = {"scale_parameter", "relative_step", "warmup_init",
                                                   "clip_threshold",  "decay_rate",    "beta1"};
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      throw UsageError(cat("--optim_args: '", one_line(key), "' is not an Adafactor argument here; did you mean '",
                           closest_key(key, kKeys), "'?"));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw UsageError(cat("--optim_args: ", key, " twice"));
    seen.push_back(key);
    const auto flag = [&](bool& out) {
      if (value == "True" || value == "true") {
        out = true;
      } else if (value == "False" || value == "false") {
        out = false;
      } else {
        throw UsageError(cat("--optim_args: ", key, "=", one_line(value), ": expected True or False"));
      }
    };
    const auto number = [&](double lo, double hi) {
      char* stop = nullptr;
      const double v = std::strtod(value.c_str(), &stop);
      if (value.empty() || *stop != 0 || !(v >= lo && v <= hi)) {
        throw UsageError(cat("--optim_args: ", key, "=", one_line(value), ": expected a number in [", lo, ", ", hi, "]"));
      }
      return v;
    };
    if (key == "scale_parameter") flag(o.scale_parameter);
    if (key == "relative_step") flag(o.relative_step);
    if (key == "warmup_init") flag(o.warmup_init);
    if (key == "clip_threshold") o.clip_threshold = number(0, HUGE_VAL);
    if (key == "decay_rate") o.decay_rate = number(-HUGE_VAL, 0);
    if (key == "beta1") {
      o.adafactor_beta1 = value == "None" ? std::nullopt : std::optional<double>(number(0, 1));
      if (o.adafactor_beta1 && *o.adafactor_beta1 >= 1) throw UsageError("--optim_args: beta1 must be below 1");
    }
  }
  // transformers' own checks.
  if (o.warmup_init && !o.relative_step) throw UsageError("--optim_args: warmup_init=True requires relative_step=True");
  if (o.relative_step && autos.learning_rate.explicit_flag) {
    throw UsageError("--learning_rate with --optim_args relative_step=True: Adafactor's relative step sets the rate "
                     "itself (transformers: \"Cannot combine manual lr and relative_step=True\"); drop one");
  }
}

OptimizerConfig parse_optimizer(JsonSection s, const AutoValues& autos) {
  OptimizerConfig o;
  // Without an optimizer section the trainer still needs one: HF's --optim (AdamW by default)
  // from the HF flags, which is what HF Trainer does when the DeepSpeed config names none.
  o.type = optim_flag_type(autos);
  o.lr = autos.learning_rate.value;
  o.beta1 = autos.adam_beta1.value;
  o.beta2 = autos.adam_beta2.value;
  o.eps = o.type == OptimizerConfig::Type::kAdagrad ? 1e-10 : autos.adam_epsilon.value;  // HF passes no eps to Adagrad
  o.weight_decay = autos.weight_decay.value;
  if (!s.present()) {
    if (o.type == OptimizerConfig::Type::kAdafactor) hf_adafactor(o, autos);
    ZT_USAGE_CHECK(autos.optim_args.value.empty() || o.type == OptimizerConfig::Type::kAdafactor,
                   "--optim_args is implemented for --optim adafactor only (got --optim ", autos.optim.value, ")");
    return o;
  }
  ZT_USAGE_CHECK(autos.optim_args.value.empty(), s.source(),
                 ": --optim_args with an optimizer block: the block sets the optimizer (HF's Trainer ignores "
                 "--optim_args then too); put its parameters in optimizer.params");

  std::string type;
  if (!s.read("type", type)) {
    s.fail("type", "the optimizer needs a type (Adam, AdamW, Lion, Adagrad, Lamb, Muon, Adafactor, OneBitAdam, ZeroOneAdam or OneBitLamb)");
  }
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  using T = OptimizerConfig::Type;
  const std::vector<std::pair<std::string, T>> kTypes = {
      {"adam", T::kAdam},       {"adamw", T::kAdamW}, {"lion", T::kLion},
      {"adagrad", T::kAdagrad}, {"lamb", T::kLamb},   {"muon", T::kMuon}, {"adafactor", T::kAdafactor},
      {"onebitadam", T::kOneBitAdam}, {"zerooneadam", T::kZeroOneAdam}, {"onebitlamb", T::kOneBitLamb}};
  const auto it = std::find_if(kTypes.begin(), kTypes.end(), [&](const auto& t) { return t.first == lower; });
  if (it == kTypes.end()) {
    static const char* kDeepSpeedOptimizers[] = {"sgd", "muadam", "muadamw",
                                                 "musgd", "cpu_adam", "fusedadam"};
    for (const char* known : kDeepSpeedOptimizers) {
      if (lower == known) {
        s.fail("type", cat("optimizer '", type,
                           "' is not implemented by zerotrain (Adam, AdamW, Lion, Adagrad, Lamb, Muon, Adafactor, OneBitAdam, ZeroOneAdam and OneBitLamb are)"));
      }
    }
    s.fail("type", cat("unknown optimizer '", type, "'; did you mean '",
                       closest_key(type, {"Adam", "AdamW", "Lion", "Adagrad", "Lamb", "Muon", "Adafactor", "OneBitAdam", "ZeroOneAdam",
                                    "OneBitLamb"}), "'?"));
  }
  o.type = it->second;
  const bool adam_family = o.type == T::kAdam || o.type == T::kAdamW;
  if (autos.optim.explicit_flag && optim_flag_type(autos) != o.type &&
      !(adam_family && optim_flag_type(autos) == T::kAdamW)) {
    s.fail("type", cat("the config says ", type, " but --optim says ", autos.optim.value,
                       "; DeepSpeed's optimizer would win over HF's: drop one or make them agree"));
  }

  JsonSection p = s.child("params");
  if (o.type != T::kMuon) read_auto(p, "lr", o.lr, autos.learning_rate, "--learning_rate", 0.0);
  read_auto(p, "weight_decay", o.weight_decay, autos.weight_decay, "--weight_decay", 0.0);
  if (o.type == T::kMuon) {
    parse_muon_params(p, o, autos);
  } else if (adam_family) {
    parse_adam_params(p, o, autos);
  } else if (o.type == T::kLion) {
    parse_lion_params(p, o, autos);
  } else if (o.type == T::kLamb) {
    parse_lamb_params(p, o, autos);
  } else if (o.type == T::kAdafactor) {
    parse_torch_adafactor_params(p, o);
  } else if (o.type == T::kOneBitAdam) {
    parse_onebit_adam_params(p, o, autos);
  } else if (o.type == T::kZeroOneAdam) {
    parse_zero_one_adam_params(p, o, autos);
  } else if (o.type == T::kOneBitLamb) {
    parse_onebit_lamb_params(p, o, autos);
  } else {
    parse_adagrad_params(p, o, autos);
  }
  p.finish();
  if (adam_family) s.neutral("legacy_fusion", {false}, "zerotrain has one fused Adam kernel, DeepSpeed's default");
  s.finish();
  // Only "AdamW" forces decoupled decay; "Adam" follows adam_w_mode (default true), as DeepSpeed.
  if (o.type == T::kAdamW) o.adam_w_mode = true;
  return o;
}

// HF Trainer's own scheduler (transformers.get_scheduler), used when the config has none.
SchedulerConfig trainer_scheduler(const AutoValues& autos) {
  SchedulerConfig c;
  static const std::vector<std::string> kNames = {"linear", "cosine", "constant", "constant_with_warmup"};
  const std::string& name = autos.lr_scheduler_type.value;
  auto it = std::find(kNames.begin(), kNames.end(), name);
  if (it == kNames.end()) {
    throw UsageError(cat("--lr_scheduler_type: '", name, "' is not implemented; did you mean '",
                         closest_key(name, kNames), "'?"));
  }
  c.trainer_type = SchedulerConfig::TrainerType(it - kNames.begin());
  c.warmup_num_steps = autos.warmup_steps.value;
  c.total_num_steps = autos.max_steps.value;
  return c;
}

void read_warmup_type(JsonSection& p, SchedulerConfig& c) {
  std::string warmup_type = "log";
  p.read("warmup_type", warmup_type);
  if (warmup_type != "log" && warmup_type != "linear") {
    p.fail("warmup_type", cat("must be \"log\" or \"linear\", got \"", warmup_type, "\""));
  }
  c.warmup_type_log = warmup_type == "log";
}

// DeepSpeed's schedulers raise ValueError for warmup_num_steps <= 0, so an explicit 0 is refused.
// "auto" passes --warmup_steps through, and its default 0 runs as DeepSpeed's warmup_num_steps 1
// would: the schedules clamp warmup to max(2, n) either way.
void read_warmup_steps(JsonSection& p, SchedulerConfig& c, const AutoValues& autos) {
  read_auto(p, "warmup_num_steps", c.warmup_num_steps, autos.warmup_steps, "--warmup_steps", int64_t(1));
}

void read_total_steps(JsonSection& p, SchedulerConfig& c, const AutoValues& autos, const char* type) {
  read_auto(p, "total_num_steps", c.total_num_steps, autos.max_steps, "--max_steps", int64_t(1));
  if (!p.has("total_num_steps")) p.fail("total_num_steps", cat(type, " needs total_num_steps"));
}

void parse_warmup_lr(JsonSection& p, SchedulerConfig& c, const AutoValues& autos) {
  AutoValue<double> zero{0.0};
  read_auto(p, "warmup_min_lr", c.warmup_min_lr, zero, "(auto: 0)", 0.0);
  double max_lr = autos.learning_rate.value;
  if (p.is_auto("warmup_max_lr")) {
    p.mark_read("warmup_max_lr");
    c.warmup_max_lr = autos.learning_rate.value;
  } else if (p.read("warmup_max_lr", max_lr, 0.0)) {
    c.warmup_max_lr = max_lr;
  } else if (c.type == SchedulerConfig::Type::kWarmupDecayLR) {
    c.warmup_max_lr = 0.001;  // WarmupDecayLR's own default; only WarmupLR falls back to the optimizer's lr
  }
  read_warmup_steps(p, c, autos);
  read_warmup_type(p, c);
  if (c.type == SchedulerConfig::Type::kWarmupDecayLR) read_total_steps(p, c, autos, "WarmupDecayLR");
}

void parse_warmup_cosine_lr(JsonSection& p, SchedulerConfig& c, const AutoValues& autos) {
  read_total_steps(p, c, autos, "WarmupCosineLR");
  read_warmup_steps(p, c, autos);
  p.read("warmup_min_ratio", c.warmup_min_ratio, 0.0, 1.0);
  p.read("cos_min_ratio", c.cos_min_ratio, 0.0, 1.0);
  read_warmup_type(p, c);
}

void parse_one_cycle(JsonSection& p, SchedulerConfig& c) {
  if (!p.read("cycle_min_lr", c.cycle_min_lr, 0.0)) p.fail("cycle_min_lr", "OneCycle needs cycle_min_lr");
  if (!p.read("cycle_max_lr", c.cycle_max_lr, 0.0)) p.fail("cycle_max_lr", "OneCycle needs cycle_max_lr");
  p.read("decay_lr_rate", c.decay_lr_rate, 0.0);
  p.read("cycle_first_step_size", c.cycle_first_step_size, 1);
  int64_t v = 0;
  // DeepSpeed allows an empty second half (the cycle then only rises).
  if (p.read("cycle_second_step_size", v, 0)) c.cycle_second_step_size = v;
  for (const char* stairs : {"cycle_first_stair_count", "cycle_second_stair_count"}) {
    p.inert(stairs, "DeepSpeed's OneCycle stores it but never reads it: its cycle has no stairs, nor has this one");
  }
  p.read("decay_step_size", c.decay_step_size, 0);
  p.read("cycle_momentum", c.cycle_momentum);
  p.read("cycle_min_mom", c.cycle_min_mom, 0.0, 1.0);
  p.read("cycle_max_mom", c.cycle_max_mom, 0.0, 1.0);
  p.read("decay_mom_rate", c.decay_mom_rate, 0.0);
}

void parse_lr_range_test(JsonSection& p, SchedulerConfig& c) {
  p.read("lr_range_test_min_lr", c.lr_range_test_min_lr, 0.0);
  p.read("lr_range_test_step_size", c.lr_range_test_step_size, 1);
  p.read("lr_range_test_step_rate", c.lr_range_test_step_rate, 0.0);
  p.read("lr_range_test_staircase", c.lr_range_test_staircase);
}

SchedulerConfig parse_scheduler(JsonSection s, const AutoValues& autos) {
  if (!s.present()) return trainer_scheduler(autos);
  if (autos.lr_scheduler_type.explicit_flag) {
    s.fail("type", "the config has a scheduler, so --lr_scheduler_type would be ignored; drop one of them");
  }
  SchedulerConfig c;
  std::string type;
  if (!s.read("type", type)) s.fail("type", "the scheduler needs a type");
  static const std::vector<std::string> kTypes = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                  "OneCycle", "LRRangeTest"};
  auto it = std::find(kTypes.begin(), kTypes.end(), type);
  if (it == kTypes.end()) {
    s.fail("type", cat("unknown scheduler '", type, "'; did you mean '", closest_key(type, kTypes), "'?"));
  }
  c.type = SchedulerConfig::Type(1 + (it - kTypes.begin()));
  JsonSection p = s.child("params");
  using T = SchedulerConfig::Type;
  switch (c.type) {
    case T::kWarmupLR:
    case T::kWarmupDecayLR: parse_warmup_lr(p, c, autos); break;
    case T::kWarmupCosineLR: parse_warmup_cosine_lr(p, c, autos); break;
    case T::kOneCycle: parse_one_cycle(p, c); break;
    case T::kLRRangeTest: parse_lr_range_test(p, c); break;
    case T::kTrainer: break;
  }
  // Every DeepSpeed schedule takes it; another value resumes a schedule mid-way, which zerotrain
  // does from its checkpoints instead.
  p.neutral("last_batch_iteration", {-1}, "the schedule starts at step 0, or where --resume_from_checkpoint left it");
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
  s.neutral("auto_cast", {false}, "the model runs in fp16 as a whole, without autocasting inputs, DeepSpeed's default");
  s.neutral("fp16_master_weights_and_grads", {false}, "master weights are always fp32, DeepSpeed's default");
  s.finish();
  return c;
}

// "bf16", or DeepSpeed's older name "bfloat16".
void parse_bf16(JsonSection& top, const AutoValues& autos, DsConfig& c) {
  if (top.has("bf16") && top.has("bfloat16")) top.fail("bfloat16", "is the old name of bf16; give one of them");
  top.mark_read("bf16");
  top.mark_read("bfloat16");
  JsonSection b = top.child(top.has("bfloat16") ? "bfloat16" : "bf16");
  c.bf16 = autos.bf16.value;
  read_auto_bool(b, "enabled", c.bf16, autos.bf16, "--bf16");
  b.neutral("immediate_grad_update", {false, true},
            "it only moves when BF16_Optimizer adds each micro-step's gradient; the sum is the same");
  b.read("check_grad_overflow", c.bf16_check_grad_overflow);
  b.neutral("bf16_master_weights_and_grads", {false}, "master weights and gradients for the step are fp32");
  b.neutral("bf16_optimizer_states", {false}, "Adam moments are always fp32, DeepSpeed's default");
  b.finish();
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
    s.neutral("super_offload", {false},
              "the CPU steps the offloaded state with zerotrain's CPU Adam, DeepSpeed's default");
    s.inert("cpuadam_cores_perc", "DeepSpeed reads it only with super_offload; the CPU Adam uses the OpenMP threads");
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
  s.neutral("use_gds", {false}, "NVMe swaps go through host memory with io_uring, DeepSpeed's default");
  s.finish();
  return a;
}

// DeepSpeed's ZeRO config takes each stage3_* key under its pydantic field name too
// ("prefetch_bucket_size"). Returns the name present (or `name`); both at once is an error.
const char* pick_name(JsonSection& s, const char* name, const char* field_name) {
  if (s.has(name) && s.has(field_name)) s.fail(field_name, cat("is another name of ", name, "; give one of them"));
  s.mark_read(name);
  s.mark_read(field_name);
  return s.has(field_name) ? field_name : name;
}

void read_stage3_limits(JsonSection& s, ZeroConfig& z, const AutoValues& autos) {
  const int64_t hidden_sq = autos.hidden_size * autos.hidden_size;
  s.read(pick_name(s, "stage3_max_live_parameters", "max_live_parameters"), z.stage3_max_live_parameters, 1);
  s.read(pick_name(s, "stage3_max_reuse_distance", "max_reuse_distance"), z.stage3_max_reuse_distance, 0);
  // "auto" as HF Trainer fills them: 0.9 h^2 for prefetch, 10 h for persistence.
  read_bucket(s, pick_name(s, "stage3_prefetch_bucket_size", "prefetch_bucket_size"), z.stage3_prefetch_bucket_size,
              int64_t(0.9 * double(hidden_sq)));
  const char* persistence = pick_name(s, "stage3_param_persistence_threshold", "param_persistence_threshold");
  if (s.is_auto(persistence)) {
    z.stage3_param_persistence_threshold = 10 * autos.hidden_size;
  } else {
    s.read(persistence, z.stage3_param_persistence_threshold, 0);
  }
  s.read(pick_name(s, "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"),
         z.stage3_gather_16bit_weights_on_model_save);
  bool legacy_name = false;  // DeepSpeed's older spelling of the same switch
  if (s.read("stage3_gather_fp16_weights_on_model_save", legacy_name)) {
    z.stage3_gather_16bit_weights_on_model_save = z.stage3_gather_16bit_weights_on_model_save || legacy_name;
  }
}

void read_offload(JsonSection& s, ZeroConfig& z) {
  z.offload_optimizer = parse_offload(s.child("offload_optimizer"), false);
  z.offload_param = parse_offload(s.child("offload_param"), true);
  s.read("sub_group_size", z.sub_group_size, 1);
  if (z.offload_optimizer.enabled() && z.stage == 0) {
    s.fail("offload_optimizer", "needs ZeRO stage 1, 2 or 3 (the offloaded optimizer steps a partition)");
  }
  if (z.offload_param.enabled() && z.stage != 3) {
    s.fail("offload_param", cat("needs ZeRO stage 3 (stage ", z.stage, " keeps every parameter on each rank)"));
  }
}

// ZeRO++'s parts that zerotrain has; each changes stage 3's collectives (DeepSpeed wires them into
// stage 3 only).
// A ZeRO++ or MiCS key set away from its default: stage 3 only (DeepSpeed wires them into stage 3
// alone), and a group of ranks (`group` > 0) of which min(group, world) divides the world, as
// DeepSpeed asserts.
void check_stage3_part(JsonSection& s, const char* key, const ZeroConfig& z, int world, int64_t group = 0) {
  if (z.stage != 3) {
    s.fail(key, cat("needs ZeRO stage 3 (DeepSpeed wires it into stage 3 only; this is stage ", z.stage, ")"));
  }
  if (group > 0 && world % std::min<int64_t>(group, world) != 0) {
    s.fail(key, cat(group, " does not divide the ", world, " ranks"));
  }
}

void read_zero_plus_plus(JsonSection& s, ZeroConfig& z, int world) {
  if (s.read("zero_quantized_weights", z.zero_quantized_weights) && z.zero_quantized_weights) {
    check_stage3_part(s, "zero_quantized_weights", z, world);
  }
  if (s.read("zero_quantized_gradients", z.zero_quantized_gradients) && z.zero_quantized_gradients) {
    check_stage3_part(s, "zero_quantized_gradients", z, world);
    if (!z.reduce_scatter) s.fail("zero_quantized_gradients", "needs reduce_scatter: true (as DeepSpeed asserts)");
  }
  if (s.read("mics_shard_size", z.mics_shard_size) && z.mics_shard_size != -1) {
    if (z.mics_shard_size < 1) s.fail("mics_shard_size", "must be -1 (no MiCS) or a number of ranks");
    check_stage3_part(s, "mics_shard_size", z, world, z.mics_shard_size);
  }
  if (s.read("mics_hierarchical_params_gather", z.mics_hierarchical_params_gather) &&
      z.mics_hierarchical_params_gather && z.mics_shard_size < 1) {
    s.fail("mics_hierarchical_params_gather", "needs mics_shard_size (DeepSpeed reads it for MiCS only)");
  }
  if (s.read("zero_hpz_partition_size", z.zero_hpz_partition_size, 1) && z.zero_hpz_partition_size > 1) {
    check_stage3_part(s, "zero_hpz_partition_size", z, world, z.zero_hpz_partition_size);
  }
  if (z.mics_hierarchical_params_gather &&
      (z.zero_quantized_weights || z.zero_quantized_gradients || z.zero_hpz_partition_size > 1)) {
    s.fail("mics_hierarchical_params_gather", "with ZeRO++'s parts is not implemented (DeepSpeed's MiCS takes none)");
  }
}

// ZeRO++'s quantized frozen weights, LoCo and ZenFlow: changes to what is communicated or stepped, not
// implemented.
void neutral_zero_plus_plus(JsonSection& s) {
  s.neutral("zero_quantized_nontrainable_weights", {false},
            "every parameter is trained in its dtype, DeepSpeed's default");
  s.neutral("zeropp_loco_param", {nullptr}, "LoCo applies to quantized gradients only, which zerotrain does not send");
  s.neutral("zenflow", {nullptr}, "no ZenFlow: the optimizer steps every gradient each step, DeepSpeed's default");
}

// ZeRO options of DeepSpeed's engine that zerotrain's flat-buffer engine has no counterpart for:
// accepted at DeepSpeed's default, refused otherwise; those that only steer DeepSpeed's speed are
// performance hints, accepted at any value.
void neutral_zero_keys(JsonSection& s) {
  s.performance_hint("use_multi_rank_bucket_allreduce", true,
                     "it only picks how DeepSpeed's stage 1/2 batches its reduce calls; zerotrain reduces "
                     "each bucket in one collective");
  s.neutral("load_from_fp32_weights", {true},
            "checkpoints always restore the fp32 master weights, DeepSpeed's default");
  s.neutral("elastic_checkpoint", {false}, "checkpoints reshard to any world size without it, DeepSpeed's default");
  s.neutral("cpu_offload", {false}, "deprecated; offload_optimizer: {\"device\": \"cpu\"} is the current key");
  s.neutral("cpu_offload_param", {false}, "deprecated; offload_param: {\"device\": \"cpu\"} is the current key");
  s.inert("cpu_offload_use_pin_memory",
          "deprecated and ignored by DeepSpeed; pin_memory of the offload blocks is read");
  s.neutral(pick_name(s, "stage3_model_persistence_threshold", "model_persistence_threshold"),
            {int64_t(9223372036854775807)}, "sys.maxsize puts no cap on persistent parameters, DeepSpeed's default");
  s.performance_hint(pick_name(s, "stage3_module_granularity_threshold", "module_granularity_threshold"), 0,
                     "stage 3 gathers per transformer block");
  s.performance_hint(pick_name(s, "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"),
                     false, "stage 3 gathers with all-gather, which moves half the bytes of an all-reduce");
  s.performance_hint(pick_name(s, "stage3_allgather_sequential", "allgather_sequential"), false,
                     "stage 3 gathers through prefetched buckets");
  s.neutral("ignore_unused_parameters", {true, false}, "GPT-2 uses every parameter, so the check never fires");
  s.neutral("legacy_stage1", {false}, "there is one stage-1 implementation, DeepSpeed's default");
  // DeepSpeed's round robin spreads the copies of gradient partitions to the host over the ranks
  // when it offloads with gradient accumulation. Here each rank already copies only its own
  // partition, once per step, as the last micro-step's buckets are reduced.
  s.performance_hint("round_robin_gradients", false,
                     "with offload_optimizer each rank copies only its own gradient partition to the host, "
                     "once per step, as the last micro-step's buckets are reduced");
  s.performance_hint("memory_efficient_linear", true,
                     "a torch linear that suits ZeRO-3's module hooks, which zerotrain does not have");
  s.neutral("pipeline_loading_checkpoint", {false}, "there is no pipeline parallelism, DeepSpeed's default");
  s.neutral("override_module_apply", {true},
            "DeepSpeed's default; it patches torch's Module.apply, which zerotrain has no use for");
  s.neutral("log_trace_cache_warnings", {false}, "there is no trace cache, DeepSpeed's default");
  s.neutral("enable_sanity_checks", {false}, "DeepSpeed's default; its debug checks are not implemented");
  s.neutral("save_muon_momentum_buffer_in_memory", {false, true},
            "it only chooses where Muon's momentum lives under NVMe offload; here it stays with the rest of the "
            "optimizer state, and the results are the same");
  neutral_zero_plus_plus(s);
}

// ZeRO-3 leaf modules: classes DeepSpeed gathers as a whole. DeepSpeed's default names MoE blocks
// GPT-2 does not have; zerotrain gathers per transformer block.
void neutral_leaf_module(JsonSection& z) {
  JsonSection s = z.child("leaf_module");
  const boost::json::array classes = {"transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
                                      "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
                                      "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock"};
  const char* why = "stage 3 gathers per transformer block; DeepSpeed's default names MoE blocks GPT-2 has none of";
  s.neutral("classes", {classes}, why);
  s.neutral("names", {boost::json::array{}}, why);
  s.neutral("name_suffixes", {boost::json::array{}}, why);
  s.finish();
}

ZeroConfig parse_zero(JsonSection s, const AutoValues& autos) {
  ZeroConfig z;
  s.read("stage", z.stage, 0, 3);
  s.read("contiguous_gradients", z.contiguous_gradients);
  s.read("overlap_comm", z.overlap_comm);
  s.read("reduce_scatter", z.reduce_scatter);
  s.read("allgather_partitions", z.allgather_partitions);
  const int64_t hidden_sq = autos.hidden_size * autos.hidden_size;
  // "auto" is HF Trainer's hidden_size squared, but at least kMinAutoBucket elements. Every
  // collective costs each rank a wakeup or two whatever its size, and on a busy core each wakeup
  // waits for a neighbour's time slice (~1.4 ms under Linux's EEVDF on 2 cores): a small model's
  // 64 KB buckets made ~100 collectives a step and a 2-rank ZeRO-2 step 15-25x slower beside two
  // busy processes, 2.5-2.9x with the floor (bench_under_load.sh; quiet steps 18-20 against
  // 20-22 ms). An explicit size is the user's and is kept.
  const int64_t auto_bucket = hidden_sq > 0 ? std::max(hidden_sq, kMinAutoBucket) : hidden_sq;
  read_bucket(s, "reduce_bucket_size", z.reduce_bucket_size, auto_bucket);
  read_bucket(s, "allgather_bucket_size", z.allgather_bucket_size, auto_bucket);
  read_stage3_limits(s, z, autos);
  read_offload(s, z);
  read_zero_plus_plus(s, z, autos.world_size);
  if (z.mics_shard_size > 0 && z.mics_shard_size < autos.world_size) {
    // DeepSpeed's MiCS_Optimizer takes none of ZeRO++'s parts.
    const char* part = z.zero_hpz_partition_size > 1 ? "zero_hpz_partition_size"
                       : z.zero_quantized_weights    ? "zero_quantized_weights"
                       : z.zero_quantized_gradients  ? "zero_quantized_gradients"
                                                     : nullptr;
    if (part) {
      s.fail("mics_shard_size",
             cat("with ", part, " is not implemented: DeepSpeed's MiCS takes none of ZeRO++'s parts"));
    }
  }
  neutral_zero_keys(s);
  neutral_leaf_module(s);
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
    has_micro = top.read("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, 1, INT32_MAX);
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
    has_gas = top.read("gradient_accumulation_steps", c.gradient_accumulation_steps, 1, INT32_MAX);
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
  // One limit whatever the value's source (the config, "auto" from a flag, or derived from
  // train_batch_size): the model counts rows and micro-steps in 32-bit ints, and 4294967298 must
  // not train as 2.
  for (auto [key, value, flag] : {std::tuple{"train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu,
                                             "--per_device_train_batch_size"},
                                  std::tuple{"gradient_accumulation_steps", c.gradient_accumulation_steps,
                                             "--gradient_accumulation_steps"}}) {
    if (value > INT32_MAX) top.fail(key, cat("must be <= ", INT32_MAX, ", got ", value, " (from the config or ", flag, ")"));
  }
  int64_t product = 0;
  if (__builtin_mul_overflow(c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps, &product) ||
      __builtin_mul_overflow(product, int64_t(world), &product)) {
    top.fail("train_batch_size", cat("train_micro_batch_size_per_gpu (", c.train_micro_batch_size_per_gpu,
                                     ") x gradient_accumulation_steps (", c.gradient_accumulation_steps,
                                     ") x world size (", world, ") exceeds 64 bits"));
  }
  if (has_train && c.train_batch_size != product) {
    top.fail("train_batch_size", cat(c.train_batch_size, " != train_micro_batch_size_per_gpu (",
                                     c.train_micro_batch_size_per_gpu, ") x gradient_accumulation_steps (",
                                     c.gradient_accumulation_steps, ") x world size (", world, ") = ", product));
  }
  c.train_batch_size = product;
}

void parse_checkpoint(JsonSection s, DsConfig& c) {
  s.read("use_node_local_storage", c.checkpoint_node_local);
  // DeepSpeed upper-cases the mode. zerotrain's tags are agreed collectively before loading, so
  // every mode behaves as "Fail".
  std::string tag_validation = "Warn";
  s.read("tag_validation", tag_validation);
  std::string mode = tag_validation;
  std::transform(mode.begin(), mode.end(), mode.begin(), ::toupper);
  if (mode != "WARN" && mode != "IGNORE" && mode != "FAIL") {
    s.fail("tag_validation", cat("must be Warn, Ignore or Fail, got \"", tag_validation, "\""));
  }
  s.neutral("load_universal", {false},
            "zerotrain's own checkpoints reshard on load; DeepSpeed's universal format is not read");
  s.inert("checkpoint_serialization", "it selects torch.save's file format; zerotrain writes HDF5");
  s.inert_block("writer", {{"type"}, {"decoupled"}, {"io_buffer_size"}, {"io_buffer_double"}, {"show_statistics"},
                           {"data_parallel"}, {"io_multiplier"}},
                "it configures DeepSpeed's torch.save writer; zerotrain writes its HDF5 files itself");
  JsonSection pw = s.child("parallel_write");
  pw.neutral("pipeline_stage", {false, true},
             "only pipeline-parallel checkpoints use it; there is no pipeline parallelism");
  pw.finish();
  s.finish();
}

// DeepSpeed's dtype names (DtypeEnum): fp32/float32/float, fp16/float16/half, bf16/bfloat16, with
// or without "torch.". Null: not given.
std::optional<DType> read_ds_dtype(JsonSection& s, std::string_view key) {
  std::string name;
  if (!s.read(key, name)) return std::nullopt;
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  try {
    return parse_dtype(name);
  } catch (const UsageError& e) {
    s.fail(key, e.what());
  }
}

// data_types. param_dtype: DeepSpeed's default (null) follows the fp16/bf16 switches, as zerotrain
// does; an explicit dtype is accepted when it is that one. grad_accum_dtype: the parameters'
// dtype, or fp32 with bf16 where DeepSpeed then runs its BF16_Optimizer (stage 0, where fp32 is
// also its default, and stage 1 without offload_optimizer); null keeps DeepSpeed's default.
void parse_data_types(JsonSection s, DsConfig& c) {
  const DType param = c.param_dtype();
  if (const boost::json::value* v = s.raw("grad_accum_dtype"); v && !v->is_null()) {
    const DType d = *read_ds_dtype(s, "grad_accum_dtype");
    const bool is_default = d == c.grad_dtype();
    c.grad_accum_dtype = d;
    if (!c.grad_dtype_supported()) {
      s.fail("grad_accum_dtype",
             cat(describe_json(*v), " is not implemented: gradients accumulate in the parameters' dtype (",
                 dtype_name(param), "), or in fp32 with bf16 at stage 0 or at stage 1 without offload_optimizer "
                 "(DeepSpeed's BF16_Optimizer)"));
    }
    if (is_default) {
      s.notice("grad_accum_dtype", cat(describe_json(*v), " accepted; changes nothing here (DeepSpeed's default for ",
                                       dtype_name(param), " at stage ", c.zero.stage, ")"));
    }
  }
  if (const boost::json::value* v = s.raw("param_dtype"); v && !v->is_null()) {
    const std::string why = cat("parameters are held in the ", dtype_name(param),
                                " of the fp16/bf16 switches, DeepSpeed's default");
    if (*read_ds_dtype(s, "param_dtype") != param) {
      s.fail("param_dtype", cat(describe_json(*v), " is not implemented: ", why));
    }
    s.notice("param_dtype", cat(describe_json(*v), " accepted; changes nothing here (", why, ")"));
  }
  if (read_ds_dtype(s, "buffer_dtype")) {
    s.inert("buffer_dtype", "zerotrain's GPT-2 has no floating-point buffers to cast");
  }
  s.finish();
}

// "tensorboard" and "csv_monitor": rank 0 writes the training scalars under output_path/job_name.
MonitorConfig parse_monitor(JsonSection s) {
  MonitorConfig m;
  s.read("enabled", m.enabled);
  s.read("output_path", m.output_path);
  s.read("job_name", m.job_name);
  s.finish();
  return m;
}

void parse_monitors(JsonSection& top, DsConfig& c) {
  c.tensorboard = parse_monitor(top.child("tensorboard"));
  c.csv_monitor = parse_monitor(top.child("csv_monitor"));
  const char* offline = "these machines have no network; use tensorboard or csv_monitor";
  top.disabled_block("wandb", "enabled", {false}, true, {{"enabled"}, {"group"}, {"team"}, {"project"}}, offline);
  top.disabled_block("comet", "enabled", {false}, true,
                     {{"enabled"}, {"samples_log_interval"}, {"project"}, {"workspace"}, {"api_key"},
                      {"experiment_name"}, {"experiment_key"}, {"online"}, {"mode"}},
                     offline);
  top.disabled_block("comms_logger", "enabled", {false}, true,
                     {{"enabled"}, {"prof_all"}, {"prof_ops"}, {"verbose"}, {"debug"}},
                     "collective bytes per kind are in every step event of metrics.jsonl");
  top.disabled_block("flops_profiler", "enabled", {false}, true,
                     {{"enabled"}, {"recompute_fwd_factor"}, {"profile_step"}, {"module_depth"}, {"top_modules"},
                      {"detailed"}, {"output_file"}},
                     "the step events of metrics.jsonl carry gflops; there is no per-module profile");
  JsonSection timers = top.child("timers");
  JsonSection throughput = timers.child("throughput");
  throughput.neutral("enabled", {true}, "samples per second are always measured, DeepSpeed's default");
  throughput.neutral("synchronized", {true}, "step times are taken after the step's work is done, DeepSpeed's default");
  throughput.finish();
  timers.finish();
}

// Top-level switches of DeepSpeed's engine at values that change nothing here.
void neutral_top_keys(JsonSection& top, int world_size) {
  const char* divide = "gradients are summed and divided by the world size after reducing, DeepSpeed's default";
  top.neutral("prescale_gradients", {false}, divide);
  top.neutral("gradient_predivide_factor", {1.0}, divide);
  top.neutral("gradient_allreduce_op", {"mean"}, divide);
  top.neutral("sparse_gradients", {false}, "embedding gradients are dense, DeepSpeed's default");
  top.neutral("disable_allgather", {false}, "updated partitions are all-gathered, DeepSpeed's default");
  top.neutral("managed_gradient_accumulation", {true},
              "the engine accumulates micro-steps itself, DeepSpeed's default");
  top.neutral("graph_harvesting", {false}, "there are no CUDA graphs, DeepSpeed's default");
  top.neutral("dump_state", {false}, "DeepSpeed's default; the start event of metrics.jsonl records the setup");
  top.neutral("memory_breakdown", {false}, "DeepSpeed's default; pool peaks are in every step event of metrics.jsonl");
  top.neutral("zero_allow_untested_optimizer", {false, true},
              "it only lifts DeepSpeed's guard against client optimizers");
  top.neutral("zero_force_ds_cpu_optimizer", {true, false},
              "offloaded state is always stepped by zerotrain's CPU Adam");
  top.neutral("sequence_parallel_size", {1}, "there is no sequence parallelism, DeepSpeed's default");
  // deepspeed.initialize builds a (data, sequence) mesh from the two; with every rank data-parallel
  // that is plain data parallelism.
  top.neutral("data_parallel_size", {world_size}, "data parallelism spans every rank");
  top.neutral("seq_parallel_communication_data_type", {"fp32", "fp16", "bf16"},
              "only sequence-parallel communication uses it, and there is none");
  top.neutral("use_data_before_expert_parallelism", {false, true},
              "only expert parallelism uses it, and there is none");
  top.neutral("datastates_ckpt", {false}, "checkpoints are written by zerotrain's HDF5 writer, DeepSpeed's default");
  top.neutral("log_level", {nullptr}, "DeepSpeed's default; ZT_LOG_LEVEL sets zerotrain's");
  top.inert("dataloader_drop_last", "only DeepSpeed's own data loader reads it; batches here are drawn by step");
  top.inert("vocabulary_size", "DeepSpeed only warns when it is not a multiple of 8");
  top.inert("fp32_allreduce", "DeepSpeed 0.19 no longer reads it; communication_data_type sets the reduction dtype");
}

// Blocks read only by code zerotrain's model does not have; DeepSpeed's engine ignores them for
// an HF GPT-2 too, at any value.
void inert_model_blocks(JsonSection& top) {
  top.inert_block("activation_checkpointing",
                  {{"partition_activations"}, {"number_checkpoints"}, {"contiguous_memory_optimization"},
                   {"synchronize_checkpoint_boundary"}, {"profile"}, {"cpu_checkpointing"}},
                  "only models calling deepspeed.checkpointing read it, HF GPT-2 does not; "
                  "use --gradient_checkpointing");
  top.inert_block("sparse_attention",
                  {{"mode"}, {"block"}, {"different_layout_per_head"}, {"num_local_blocks"}, {"num_global_blocks"},
                   {"attention"}, {"horizontal_global_attention"}, {"num_different_global_patterns"},
                   {"num_random_blocks"}, {"local_window_blocks"}, {"global_block_indices"},
                   {"global_block_end_indices"}, {"num_sliding_window_blocks"}},
                  "only models built from DeepSpeed's SparseSelfAttention read it; GPT-2's attention stays dense");
  top.inert_block("pipeline",
                  {{"stages"}, {"partition"}, {"seed_layers"}, {"activation_checkpoint_interval"},
                   {"pipe_partitioned"}, {"grad_partitioned"}, {"use_reentrant"}},
                  "only DeepSpeed's PipelineModule reads it, which HF Trainer never builds");
  top.inert_block("eigenvalue",
                  {{"enabled"}, {"verbose"}, {"max_iter"}, {"tol"}, {"stability"}, {"gas_boundary_resolution"},
                   {"layer_name"}, {"layer_num"}},
                  "DeepSpeed 0.19 reads eigenvalue only inside quantize_training");
}

// compression_training: each technique is switched by shared_parameters.enabled (layer_reduction
// by its own enabled); different_groups holds user-named groups, whose contents are not checked.
void disabled_compression(JsonSection& top) {
  JsonSection s = top.child("compression_training");
  const char* why = "zerotrain trains the full-precision, unpruned model";
  const std::vector<KnownKey> pruning = {{"enabled"}, {"method"}, {"schedule_offset"}};
  const std::vector<std::pair<const char*, std::vector<KnownKey>>> techniques = {
      {"weight_quantization",
       {{"enabled"}, {"quantizer_kernel"}, {"schedule_offset"}, {"quantize_groups"}, {"quantize_verbose"},
        {"quantization_type"}, {"quantize_weight_in_forward"}, {"rounding"},
        {"fp16_mixed_quantize", {{"enabled"}, {"quantize_change_ratio"}}}}},
      {"activation_quantization", {{"enabled"}, {"quantization_type"}, {"range_calibration"}, {"schedule_offset"}}},
      {"sparse_pruning",
       {{"enabled"}, {"method"}, {"schedule_offset"}, {"schedule_offset_end"}, {"schedule_offset_stride"},
        {"block_pattern"}, {"dense_ratio"}, {"excluded_modules"}}},
      {"row_pruning", pruning},
      {"head_pruning", {{"enabled"}, {"method"}, {"schedule_offset"}, {"num_heads"}}},
      {"channel_pruning", pruning}};
  for (const auto& [name, keys] : techniques) {
    JsonSection t = s.child(name);
    t.disabled_block("shared_parameters", "enabled", {false}, true, keys, why);
    t.mark_read("different_groups");
    t.finish();
  }
  s.disabled_block("layer_reduction", "enabled", {false}, true,
                   {{"enabled"}, {"keep_number_layer"}, {"module_name_prefix"}, {"teacher_layer"},
                    {"other_module_name"}},
                   why);
  s.finish();
}

// DeepSpeed features switched by one key: accepted whole while off, refused when on.
void disabled_features(JsonSection& top) {
  const char* scope = "outside zerotrain's data-parallel ZeRO training of one model";
  top.disabled_block("amp", "enabled", {false}, true,
                     {{"enabled"}, {"opt_level"}, {"cast_model_type"}, {"patch_torch_functions"},
                      {"keep_batchnorm_fp32"}, {"master_weights"}, {"loss_scale"}, {"cast_model_outputs"},
                      {"num_losses"}, {"verbosity"}, {"min_loss_scale"}, {"max_loss_scale"}},
                     "NVIDIA Apex AMP; use fp16 or bf16");
  top.disabled_block("torch_autocast", "enabled", {false}, true,
                     {{"enabled"}, {"dtype"}, {"lower_precision_safe_modules"}},
                     "the whole model runs in the dtype of fp16/bf16; use those");
  top.disabled_block("autotuning", "enabled", {false}, true,
                     {{"enabled"}, {"fast"}, {"results_dir"}, {"exps_dir"}, {"overwrite"}, {"start_profile_step"},
                      {"end_profile_step"}, {"metric"}, {"metric_path"}, {"tuner_type"}, {"tuner_early_stopping"},
                      {"tuner_num_trials"}, {"arg_mappings"},
                      {"model_info", {{"profile"}, {"num_params"}, {"hidden_size"}, {"num_layers"}}},
                      {"model_info_path"}, {"mp_size"}, {"max_train_batch_size"}, {"min_train_batch_size"},
                      {"max_train_micro_batch_size_per_gpu"}, {"min_train_micro_batch_size_per_gpu"},
                      {"num_tuning_micro_batch_sizes"}},
                     "zero_estimate --gpu_memory/--cpu_memory recommends a configuration instead");
  top.disabled_block("elasticity", "enabled", {false}, true,
                     {{"enabled"}, {"max_train_batch_size"}, {"micro_batch_sizes"}, {"min_gpus"}, {"max_gpus"},
                      {"min_time"}, {"version"}, {"prefer_larger_batch"}, {"ignore_non_elastic_batch_info"},
                      {"model_parallel_size"}, {"num_gpus_per_node"}},
                     "the batch sizes are the configured ones; resume at another world size reshards instead");
  top.disabled_block("nebula", "enabled", {false}, true,
                     {{"enabled"}, {"persistent_storage_path"}, {"persistent_time_interval"},
                      {"num_of_version_in_retention"}, {"enable_nebula_load"}, {"nebula_load_path"}},
                     "checkpoints are written by zerotrain's HDF5 writer");
  top.disabled_block("hybrid_engine", "enabled", {false}, true,
                     {{"enabled"}, {"max_out_tokens"}, {"inference_tp_size"}, {"release_inference_cache"},
                      {"pin_parameters"}, {"tp_gather_partition_size"}, {"enable_cuda_graph"}},
                     "there is no RLHF generation engine");
  top.disabled_block("progressive_layer_drop", "enabled", {false}, true, {{"enabled"}, {"theta"}, {"gamma"}},
                     "every layer runs every step");
  top.disabled_block("curriculum_learning", "enabled", {false}, true,
                     {{"enabled"}, {"curriculum_type"}, {"min_difficulty"}, {"max_difficulty"}, {"schedule_type"},
                      {"schedule_config"}},
                     "batches are drawn by step at the full --block_size");
  top.disabled_block("data_efficiency", "enabled", {false}, true,
                     {{"enabled"}, {"seed"},
                      {"data_sampling", {{"enabled"}, {"num_epochs"}, {"num_workers"}, {"pin_memory"},
                                         {"curriculum_learning"}, {"dynamic_batching"}}},
                      {"data_routing", {{"enabled"}, {"random_ltd"}}}},
                     "batches are drawn by step at the full --block_size and every token runs every layer");
  top.disabled_block("quantize_training", "enabled", {false}, true,
                     {{"enabled"}, {"quantize_verbose"}, {"quantizer_kernel"}, {"quantize-algo"}, {"quantize_bits"},
                      {"quantize_schedule"}, {"quantize_groups"}, {"fp16_mixed_quantize"},
                      {"eigenvalue", {{"enabled"}, {"verbose"}, {"max_iter"}, {"tol"}, {"stability"},
                                      {"gas_boundary_resolution"}, {"layer_name"}, {"layer_num"}}}},
                     "zerotrain trains the full-precision model");
  top.disabled_block("expert_parallel", "enabled", {false}, true,
                     {{"enabled"}, {"autoep_size"}, {"expert_tensor_parallel_size"}, {"validate_folding_routing"},
                      {"preset_model"}, {"moe_layer_pattern"}, {"expert_pattern"}, {"router_pattern"},
                      {"use_grouped_mm"}, {"disable_triton_grouped_mm"}, {"route_norm"}, {"route_scale"},
                      {"score_apply"}, {"combine_impl"}, {"num_expert_groups"}, {"num_limited_groups"},
                      {"score_func"}, {"top_k"}, {"routed_scaling_factor"}, {"expert_w1"}, {"expert_w2"},
                      {"num_experts_attr"}, {"top_k_attr"}, {"has_shared_experts"}, {"shared_experts_pattern"},
                      {"shared_experts_gate_pattern"}},
                     "GPT-2 has no experts");
  // DeepSpeed's WeightQuantConfig is on by default once the block is there.
  top.disabled_block("weight_quantization", "enabled", {false}, false,
                     {{"enabled"}, {"num_bits"}, {"q_type"}, {"q_groups"}, {"quantized_initialization"},
                      {"post_init_quant"}},
                     "parameters are held in the dtype of fp16/bf16, unquantized");
  top.disabled_block("compile", "deepcompile", {false}, true,
                     {{"deepcompile"}, {"free_activation"}, {"free_activation_threshold"}, {"offload_activation"},
                      {"offload_activation_pin_memory"}, {"offload_opt_states"}, {"double_buffer"},
                      {"symmetric_memory"}, {"debug_log"}, {"offload_parameters"}, {"sync_before_reduce"},
                      {"sync_after_reduce"}, {"sync_before_allgather"}, {"sync_after_allgather"},
                      {"keep_int_input_tensors"}, {"keep_all_input_tensors"}, {"passes"}},
                     "there is no torch.compile; the kernels are zerotrain's own");
  // autotp_size 0 is DeepSpeed's "off"; 1 is a tensor-parallel group of one rank, also no split.
  top.disabled_block("tensor_parallel", "autotp_size", {0, 1}, true,
                     {{"autotp_size"}, {"dtype"}, {"tp_overlap_comm"},
                      {"tp", {{"tp_size"}, {"tp_grain_size"}, {"mpu"}, {"tp_group"}}},
                      {"tensor_parallel", {{"tp_size"}, {"tp_grain_size"}, {"mpu"}, {"tp_group"}}},
                      {"injection_policy_tuple"}, {"partition_config"}, {"preset_model"}, {"keep_module_on_host"},
                      {"replace_with_kernel_inject"}, {"kernel_inject"}},
                     scope);
  disabled_compression(top);
}

}  // namespace

const char* optimizer_name(OptimizerConfig::Type type) {
  switch (type) {
    case OptimizerConfig::Type::kAdam: return "Adam";
    case OptimizerConfig::Type::kAdamW: return "AdamW";
    case OptimizerConfig::Type::kLion: return "Lion";
    case OptimizerConfig::Type::kAdagrad: return "Adagrad";
    case OptimizerConfig::Type::kLamb: return "Lamb";
    case OptimizerConfig::Type::kMuon: return "Muon";
    case OptimizerConfig::Type::kAdafactor: return "Adafactor";
    case OptimizerConfig::Type::kOneBitAdam: return "OneBitAdam";
    case OptimizerConfig::Type::kZeroOneAdam: return "ZeroOneAdam";
    case OptimizerConfig::Type::kOneBitLamb: return "OneBitLamb";
  }
  return "?";
}

DsConfig parse_ds_config(const boost::json::value& json, const std::string& source,
                         const AutoValues& autos) {
  if (!json.is_object()) throw UsageError(cat(source, ": the config must be a JSON object"));
  DsConfig c;
  c.source = source;
  JsonSection top(&json.get_object(), "", source, &c.notices);
  resolve_batch(top, c, autos);
  top.read("steps_per_print", c.steps_per_print, 1);
  top.read("wall_clock_breakdown", c.wall_clock_breakdown);
  c.gradient_clipping = autos.max_grad_norm.value;
  read_auto(top, "gradient_clipping", c.gradient_clipping, autos.max_grad_norm, "--max_grad_norm", 0.0);
  c.optimizer = parse_optimizer(top.child("optimizer"), autos);
  c.scheduler = parse_scheduler(top.child("scheduler"), autos);
  c.fp16 = parse_fp16(top.child("fp16"), autos);
  parse_bf16(top, autos, c);
  if (c.fp16.enabled && c.bf16) top.fail("bf16", "fp16 and bf16 cannot both be enabled");
  c.zero = parse_zero(top.child("zero_optimization"), autos);
  if (c.optimizer.onebit() && c.zero.stage > 0) {
    // DeepSpeed asserts the same: its 1-bit optimizers all-reduce whole momenta where ZeRO
    // partitions them.
    const char* what = c.optimizer.type == OptimizerConfig::Type::kZeroOneAdam  ? "ZeroOneAdam: 0/1 Adam"
                       : c.optimizer.type == OptimizerConfig::Type::kOneBitLamb ? "OneBitLamb: 1-bit Lamb"
                                                                                : "OneBitAdam: 1-bit Adam";
    top.fail("zero_optimization.stage",
             cat(c.zero.stage, " with optimizer ", what,
                 " is not compatible with ZeRO (DeepSpeed refuses it too); use stage 0"));
  }
  if ((c.optimizer.type == OptimizerConfig::Type::kLamb || c.optimizer.type == OptimizerConfig::Type::kOneBitLamb) &&
      c.fp16.enabled && c.fp16.loss_scale != 0) {
    // DeepSpeed's engine asserts it for both ("DeepSpeed lamb optimizer requires dynamic loss
    // scaling"), before it builds either. Only where fp16 is on: DeepSpeed asserts on the key even
    // in an fp32 or bf16 run, where the scale means nothing.
    top.fail("fp16.loss_scale", cat(c.fp16.loss_scale, " (static) with optimizer ", optimizer_name(c.optimizer.type),
                                    ": DeepSpeed's ", optimizer_name(c.optimizer.type),
                                    " requires dynamic loss scaling (loss_scale 0)"));
  }
  c.communication_data_type = read_ds_dtype(top, "communication_data_type");
  parse_checkpoint(top.child("checkpoint"), c);
  if (c.checkpoint_node_local && c.zero.mics_shard_size > 0 && c.zero.mics_shard_size < autos.world_size) {
    top.fail("checkpoint.use_node_local_storage", "with MiCS is not implemented: the first shard group alone writes "
                                                  "the checkpoint, which every node must then read");
  }
  parse_data_types(top.child("data_types"), c);
  c.aio = parse_aio(top.child("aio"));
  parse_monitors(top, c);
  neutral_top_keys(top, autos.world_size);
  inert_model_blocks(top);
  disabled_features(top);
  top.finish();
  return c;
}

DsConfig load_ds_config(const std::string& path, const AutoValues& autos) {
  DsConfig c = parse_ds_config(read_json_file(path), path, autos);
  for (const auto& line : c.notices) log_info(line);
  return c;
}

}  // namespace zt
