// The DeepSpeed config reader: every error class names its key (or line and column), "auto"
// resolution, the batch-size arithmetic, and every shipped config loads.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "config/ds_config.h"
#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/train_args.h"
#include "core/error.h"
#include "optim/optimizer.h"

namespace zt {
namespace {

DsConfig parse(const std::string& text, AutoValues autos = {}) {
  return parse_ds_config(parse_json_lenient(text, "ds.json"), "ds.json", autos);
}

std::string error_of(const std::string& text, AutoValues autos = {}) {
  try {
    parse(text, autos);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DsConfig, CommentsAndTrailingCommasAreAccepted) {
  DsConfig c = parse(R"({
    // a comment
    "train_micro_batch_size_per_gpu": 4, /* another */
    "gradient_accumulation_steps": 2,
  })");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.train_batch_size, 8);
}

TEST(DsConfig, MalformedJsonNamesLineAndColumn) {
  std::string e = error_of("{\n  \"train_batch_size\": 8\n  \"steps_per_print\": 1\n}");
  EXPECT_NE(e.find("ds.json:3:3: malformed JSON"), std::string::npos) << e;
}

TEST(DsConfig, UnknownKeyNamesPathAndClosestKey) {
  std::string e = error_of(R"({"zero_optimization": {"stage": 0, "overlap_com": true}})");
  EXPECT_NE(e.find("zero_optimization.overlap_com: unknown key"), std::string::npos) << e;
  EXPECT_NE(e.find("'zero_optimization.overlap_comm'"), std::string::npos) << e;
  e = error_of(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clippin": 1.0})");
  EXPECT_NE(e.find("gradient_clippin: unknown key; did you mean 'gradient_clipping'"), std::string::npos) << e;
}

// Keys and values are echoed in messages; a control character in them (found by fuzzing the
// manifest reader) is escaped, so the message stays one line.
TEST(DsConfig, EchoedControlCharactersKeepTheMessageOneLine) {
  std::string e = error_of("{\"steps_per_print\": 1, \"a\\nb\": 1}");
  EXPECT_NE(e.find("ds.json: a\\x0ab: unknown key"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(DsConfig, WrongTypesAndRanges) {
  EXPECT_NE(error_of(R"({"steps_per_print": "ten"})").find("steps_per_print: expected an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"steps_per_print": 0})").find("steps_per_print: must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(error_of(R"({"wall_clock_breakdown": 1})").find("expected true or false"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})").find("optimizer.params.betas"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})").find("[0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 7}})").find("zero_optimization.stage: must be <= 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": 3})").find("expected an object"), std::string::npos);
  EXPECT_NE(error_of(R"([1, 2])").find("must be a JSON object"), std::string::npos);
}

TEST(DsConfig, UnimplementedDeepSpeedKeysSaySo) {
  std::string e = error_of(R"({"flops_profiler": {"enabled": true}})");
  EXPECT_NE(e.find("ds.json: flops_profiler.enabled: true is not implemented: "), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "MuAdam"}})");
  EXPECT_NE(e.find("'MuAdam' is not implemented"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "AdamX"}})");
  EXPECT_NE(e.find("unknown optimizer 'AdamX'"), std::string::npos) << e;
  e = error_of(R"({"scheduler": {"type": "WarmupCosine"}})");
  EXPECT_NE(e.find("did you mean 'WarmupCosineLR'"), std::string::npos) << e;
  e = error_of(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_NE(e.find("zero_optimization.offload_optimizer: needs ZeRO stage 1"), std::string::npos) << e;
  e = error_of(R"({"fp16": {"enabled": true, "auto_cast": true}})");
  EXPECT_NE(e.find("fp16.auto_cast"), std::string::npos) << e;
}

TEST(DsConfig, AutoResolvesFromTrainerFlags) {
  AutoValues a;
  a.world_size = 1;
  a.hidden_size = 64;
  a.micro_batch = {6, true};
  a.grad_accum = {3, true};
  a.learning_rate = {2e-4, true};
  a.adam_beta2 = {0.95, true};
  a.weight_decay = {0.01, false};
  a.max_steps = {500, true};
  a.warmup_steps = {20, true};
  a.bf16 = {true, true};
  DsConfig c = parse(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 0, "reduce_bucket_size": "auto"}})", a);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 6);
  EXPECT_EQ(c.gradient_accumulation_steps, 3);
  EXPECT_EQ(c.train_batch_size, 18);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 20);
  EXPECT_EQ(c.scheduler.total_num_steps, 500);
  EXPECT_DOUBLE_EQ(*c.scheduler.warmup_max_lr, 2e-4);
  EXPECT_TRUE(c.bf16);
  EXPECT_EQ(c.param_dtype(), DType::kBF16);
  EXPECT_EQ(c.zero.reduce_bucket_size, kMinAutoBucket);  // 64 squared is below the floor
}

// "auto" bucket sizes: HF's hidden_size squared, never below kMinAutoBucket (2^20) elements, so
// that a small model does not run a hundred latency-bound collectives a step; explicit sizes kept.
TEST(DsConfig, AutoBucketSizesAreHiddenSquaredWithAFloor) {
  const auto buckets = [](int64_t hidden, const char* zero) {
    AutoValues a;
    a.world_size = 1;
    a.hidden_size = hidden;
    const DsConfig c = parse(std::string(R"({"zero_optimization": )") + zero + "}", a);
    return std::pair{c.zero.reduce_bucket_size, c.zero.allgather_bucket_size};
  };
  const char* autos = R"({"stage": 2, "reduce_bucket_size": "auto", "allgather_bucket_size": "auto"})";
  EXPECT_EQ(buckets(4096, autos), std::pair(int64_t(4096) * 4096, int64_t(4096) * 4096));
  EXPECT_EQ(buckets(768, autos), std::pair(int64_t(1) << 20, int64_t(1) << 20));
  EXPECT_EQ(buckets(1024, autos), std::pair(int64_t(1) << 20, int64_t(1) << 20));  // exactly the floor
  EXPECT_EQ(buckets(128, R"({"stage": 2, "reduce_bucket_size": 16384, "allgather_bucket_size": 5000})"),
            std::pair(int64_t(16384), int64_t(5000)));
}

TEST(DsConfig, ExplicitFlagDisagreeingWithConfigIsAnError) {
  AutoValues a;
  a.learning_rate = {1e-3, true};
  std::string e = error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}})", a);
  EXPECT_NE(e.find("optimizer.params.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("--learning_rate"), std::string::npos) << e;
  a.learning_rate = {1e-3, false};  // a default flag value never conflicts
  EXPECT_DOUBLE_EQ(parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}})", a).optimizer.lr, 3e-4);
}

TEST(DsConfig, BatchSizeArithmetic) {
  AutoValues a;
  a.world_size = 2;
  EXPECT_EQ(parse(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4})", a).gradient_accumulation_steps, 2);
  EXPECT_EQ(parse(R"({"train_batch_size": 16, "gradient_accumulation_steps": 4})", a).train_micro_batch_size_per_gpu, 2);
  DsConfig only_train = parse(R"({"train_batch_size": 16})", a);
  EXPECT_EQ(only_train.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(only_train.gradient_accumulation_steps, 1);
  std::string e = error_of(R"({"train_batch_size": 15, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", a);
  EXPECT_NE(e.find("train_batch_size: 15 != train_micro_batch_size_per_gpu (4) x gradient_accumulation_steps (2) x world size (2) = 16"),
            std::string::npos) << e;
  EXPECT_NE(error_of(R"({"train_batch_size": 15, "train_micro_batch_size_per_gpu": 4})", a).find("not divisible"),
            std::string::npos);
}

TEST(DsConfig, AdamModes) {
  EXPECT_TRUE(parse(R"({"optimizer": {"type": "Adam"}})").optimizer.adam_w_mode);  // DeepSpeed's default
  EXPECT_FALSE(parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})").optimizer.adam_w_mode);
  EXPECT_TRUE(parse(R"({"optimizer": {"type": "adamw", "params": {"adam_w_mode": false}}})").optimizer.adam_w_mode);
  EXPECT_NE(error_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})").find("cannot both"), std::string::npos);
}

// Lion and Adagrad: DeepSpeed's blocks (their defaults and keys), HF's --optim names, and the
// two disagreeing.
TEST(DsConfig, LionAndAdagradBlocks) {
  using T = OptimizerConfig::Type;
  const OptimizerConfig lion = parse(R"({"optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.95, 0.98],
      "weight_decay": 0.1}}})").optimizer;
  EXPECT_EQ(lion.type, T::kLion);
  EXPECT_DOUBLE_EQ(lion.lr, 1e-4);
  EXPECT_DOUBLE_EQ(lion.beta1, 0.95);
  EXPECT_DOUBLE_EQ(lion.beta2, 0.98);
  EXPECT_DOUBLE_EQ(lion.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(parse(R"({"optimizer": {"type": "lion"}})").optimizer.beta2, 0.999);  // DeepSpeed's Lion default
  const OptimizerConfig adagrad =
      parse(R"({"optimizer": {"type": "Adagrad", "params": {"lr": 0.01, "lr_decay": 0.1}}})").optimizer;
  EXPECT_EQ(adagrad.type, T::kAdagrad);
  EXPECT_DOUBLE_EQ(adagrad.eps, 1e-10);  // torch's and DeepSpeed's default, not Adam's 1e-8
  EXPECT_DOUBLE_EQ(adagrad.lr_decay, 0.1);
  // Keys of another optimizer are unknown keys; values outside the range are refused by key.
  std::string e = error_of(R"({"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})");
  EXPECT_NE(e.find("optimizer.params.eps"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"betas": [0.9, 0.99]}}})");
  EXPECT_NE(e.find("optimizer.params.betas"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"lr_decay": -1}}})");
  EXPECT_NE(e.find("optimizer.params.lr_decay"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"initial_accumulator_value": 0.1}}})");
  EXPECT_NE(e.find("optimizer.params.initial_accumulator_value: 0.1 is not implemented"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Lion", "params": {"betas": [0.9, 1.0]}}})");
  EXPECT_NE(e.find("[0, 1)"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Adagrad", "legacy_fusion": false}})");
  EXPECT_NE(e.find("optimizer.legacy_fusion"), std::string::npos) << e;
}

TEST(DsConfig, LambBlock) {
  const OptimizerConfig lamb = parse(R"({"optimizer": {"type": "Lamb", "params": {"lr": 2e-3, "max_coeff": 5,
      "min_coeff": 0.05, "eps_inside_sqrt": true, "bias_correction": false}}})").optimizer;
  EXPECT_EQ(lamb.type, OptimizerConfig::Type::kLamb);
  EXPECT_DOUBLE_EQ(lamb.max_coeff, 5);
  EXPECT_DOUBLE_EQ(lamb.min_coeff, 0.05);
  EXPECT_TRUE(lamb.eps_inside_sqrt);
  EXPECT_FALSE(lamb.bias_correction);
  EXPECT_EQ(lamb.moment_count(), 2);
  const OptimizerConfig defaults = parse(R"({"optimizer": {"type": "LAMB"}})").optimizer;
  EXPECT_DOUBLE_EQ(defaults.max_coeff, 10.0);  // FusedLamb's defaults
  EXPECT_DOUBLE_EQ(defaults.min_coeff, 0.01);
  std::string e = error_of(R"({"optimizer": {"type": "Lamb", "params": {"min_coeff": 2, "max_coeff": 1}}})");
  EXPECT_NE(e.find("optimizer.params.min_coeff: 2 is above max_coeff (1)"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1.0}}})");
  EXPECT_NE(e.find("optimizer.params.max_grad_norm"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Lamb", "params": {"adam_w_mode": true}}})");
  EXPECT_NE(e.find("optimizer.params.adam_w_mode: unknown key"), std::string::npos) << e;
}

// DeepSpeed's Muon block: the two groups' keys and their own defaults where a key is absent.
TEST(DsConfig, MuonBlock) {
  const OptimizerConfig muon = parse(R"({"optimizer": {"type": "Muon", "params": {"lr": 0.01, "adam_lr": 5e-4,
      "momentum": 0.9, "weight_decay": 0.1, "betas": [0.8, 0.9], "eps": 1e-8, "ns_method": "standard"}}})").optimizer;
  EXPECT_EQ(muon.type, OptimizerConfig::Type::kMuon);
  EXPECT_DOUBLE_EQ(muon.lr, 0.01);
  EXPECT_DOUBLE_EQ(muon.muon_lr, 0.01);  // lr serves the matrices unless muon_lr says otherwise
  EXPECT_DOUBLE_EQ(muon.adam_lr, 5e-4);
  EXPECT_DOUBLE_EQ(muon.momentum, 0.9);
  EXPECT_DOUBLE_EQ(muon.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(muon.beta2, 0.9);
  EXPECT_DOUBLE_EQ(muon.eps, 1e-8);
  EXPECT_EQ(muon.ns_method, OptimizerConfig::NsMethod::kStandard);
  // MuonWithAuxAdam's defaults: lr 0.02 for the matrices, 3e-4 for the rest, betas (0.9, 0.95),
  // eps 1e-10, momentum 0.95, Gram Newton-Schulz.
  const OptimizerConfig defaults = parse(R"({"optimizer": {"type": "muon"}})").optimizer;
  EXPECT_DOUBLE_EQ(defaults.muon_lr, 0.02);
  EXPECT_DOUBLE_EQ(defaults.adam_lr, 3e-4);
  EXPECT_DOUBLE_EQ(defaults.lr, 0.02);
  EXPECT_DOUBLE_EQ(defaults.beta1, 0.9);
  EXPECT_DOUBLE_EQ(defaults.beta2, 0.95);
  EXPECT_DOUBLE_EQ(defaults.eps, 1e-10);
  EXPECT_DOUBLE_EQ(defaults.momentum, 0.95);
  EXPECT_EQ(defaults.ns_method, OptimizerConfig::NsMethod::kGram);
  EXPECT_DOUBLE_EQ(parse(R"({"optimizer": {"type": "Muon", "params": {"lr": 0.01, "muon_lr": 0.03}}})")
                       .optimizer.muon_lr, 0.03);
  // "auto" follows the HF flags, as for the other optimizers.
  AutoValues a;
  a.learning_rate = {0.04, true};
  const OptimizerConfig from_flags = parse(R"({"optimizer": {"type": "Muon", "params": {"lr": "auto"}}})", a).optimizer;
  EXPECT_DOUBLE_EQ(from_flags.muon_lr, 0.04);
  EXPECT_DOUBLE_EQ(from_flags.adam_lr, 0.04);
  // Bad values name the key.
  std::string e = error_of(R"({"optimizer": {"type": "Muon", "params": {"momentum": 1.0}}})");
  EXPECT_NE(e.find("optimizer.params.momentum: must be in [0, 1), got 1"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Muon", "params": {"ns_method": "svd"}}})");
  EXPECT_NE(e.find("optimizer.params.ns_method: 'svd' is not a Newton-Schulz method (gram or standard)"),
            std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Muon", "params": {"nesterov": false}}})");
  EXPECT_NE(e.find("optimizer.params.nesterov: unknown key"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Muon", "params": {"muon_lr": -1}}})");
  EXPECT_NE(e.find("optimizer.params.muon_lr"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Muon", "params": {"lr": 0, "adam_lr": 1e-3}}})");
  EXPECT_NE(e.find("optimizer.params.lr: 0 while muon_lr or adam_lr is not"), std::string::npos) << e;
}

TEST(DsConfig, HfOptimNames) {
  using T = OptimizerConfig::Type;
  AutoValues a;
  a.adam_beta2 = {0.99, true};
  a.optim = {"lion_32bit", true};
  const OptimizerConfig lion = parse("{}", a).optimizer;
  EXPECT_EQ(lion.type, T::kLion);
  EXPECT_DOUBLE_EQ(lion.beta2, 0.99);  // HF builds Lion with the Adam flags' betas
  a.optim = {"adagrad", true};
  EXPECT_EQ(parse("{}", a).optimizer.type, T::kAdagrad);
  EXPECT_DOUBLE_EQ(parse("{}", a).optimizer.eps, 1e-10);
  a.optim = {"adamw_torch_fused", true};
  EXPECT_EQ(parse("{}", a).optimizer.type, T::kAdamW);
  EXPECT_EQ(parse(R"({"optimizer": {"type": "Adam"}})", a).optimizer.type, T::kAdam);  // the same state and rule
  a.optim = {"lion_32bit", true};
  std::string e = error_of(R"({"optimizer": {"type": "AdamW"}})", a);
  EXPECT_NE(e.find("optimizer.type: the config says AdamW but --optim says lion_32bit"), std::string::npos) << e;
  a.optim = {"adamw_8bit", true};
  e = error_of("{}", a);
  EXPECT_NE(e.find("--optim adamw_8bit is not implemented by zerotrain"), std::string::npos) << e;
  a.optim = {"lion32", true};
  e = error_of("{}", a);
  EXPECT_NE(e.find("--optim: unknown optimizer 'lion32'; did you mean 'lion_32bit'?"), std::string::npos) << e;
}

TEST(DsConfig, IntegersWrittenInExponentForm) {
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 0, "reduce_bucket_size": 5e8}})").zero.reduce_bucket_size,
            500000000);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 0, "reduce_bucket_size": 5.5}})").find("expected an integer"),
            std::string::npos);
}

TEST(DsConfig, EveryShippedConfigLoads) {
  const std::filesystem::path dir = ZT_SOURCE_DIR "/configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    AutoValues a;
    a.hidden_size = 768;
    a.max_steps = {100, false};
    EXPECT_NO_THROW(load_ds_config(entry.path().string(), a)) << entry.path();
    ++loaded;
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir / "models")) {
    EXPECT_NO_THROW(load_model_config(entry.path().string())) << entry.path();
    ++loaded;
  }
  EXPECT_GE(loaded, 3);
}

TEST(ModelConfig, ValidatesKeys) {
  EXPECT_EQ(parse_model_config(R"({"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256})", "m.json").n_layer, 2);
  auto error = [](const std::string& text) {
    try {
      parse_model_config(text, "m.json");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error(R"({"n_embd": 64, "n_head": 5})").find("divisible"), std::string::npos);
  EXPECT_NE(error(R"({"n_layers": 2})").find("did you mean 'n_layer'"), std::string::npos);
  EXPECT_NE(error(R"({"activation_function": "relu"})").find("activation_function"), std::string::npos);
  EXPECT_NE(error(R"({"n_layer": 0})").find("n_layer: must be >= 1"), std::string::npos);
}

TEST(TrainArgs, FlagsAndErrors) {
  const char* ok[] = {"zerotrain", "--deepspeed", "ds.json", "--config_name", "m.json", "--train_data", "x",
                      "--output_dir", "o", "--max_steps", "5", "--bf16", "--learning_rate", "1e-3"};
  auto args = parse_train_args(14, ok);
  ASSERT_TRUE(args);
  EXPECT_TRUE(args->bf16);
  EXPECT_TRUE(args->given("learning_rate"));
  EXPECT_FALSE(args->given("weight_decay"));
  const char* misspelled[] = {"zerotrain", "--deepspeed", "ds.json", "--learning_rat", "1e-3"};
  try {
    parse_train_args(5, misspelled);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--learning_rate"), std::string::npos) << e.what();
  }
  const char* missing[] = {"zerotrain", "--config_name", "m.json"};
  EXPECT_THROW(parse_train_args(3, missing), UsageError);
  EXPECT_THROW(parse_bool_flag("bf16", "maybe"), UsageError);
  EXPECT_TRUE(parse_bool_flag("bf16", "True"));
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

TEST(DsConfig, TrainerSchedulerWhenTheConfigHasNone) {
  AutoValues a;
  a.lr_scheduler_type = {"cosine", true};
  a.warmup_steps = {5, true};
  a.max_steps = {50, true};
  DsConfig c = parse("{}", a);
  EXPECT_EQ(c.scheduler.type, SchedulerConfig::Type::kTrainer);
  EXPECT_EQ(c.scheduler.trainer_type, SchedulerConfig::TrainerType::kCosine);
  EXPECT_EQ(c.scheduler.total_num_steps, 50);
  a.lr_scheduler_type = {"polynomial", true};
  EXPECT_NE(error_of("{}", a).find("--lr_scheduler_type: 'polynomial' is not implemented"), std::string::npos);
  a.lr_scheduler_type = {"linear", true};
  EXPECT_NE(error_of(R"({"scheduler": {"type": "WarmupLR"}})", a).find("--lr_scheduler_type would be ignored"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

DsConfig parse_text(const std::string& text) {
  return parse_ds_config(boost::json::parse(text), "ds.json", AutoValues{});
}

std::string offload_error(const std::string& text) {
  try {
    parse_text(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OffloadConfig, ReadsDeepSpeedKeys) {
  const DsConfig c = parse_text(R"({"zero_optimization": {"stage": 3, "sub_group_size": 2e6,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 6,
                            "fast_init": false, "pipeline_read": true},
      "offload_param": {"device": "cpu", "buffer_size": 1e7, "max_in_cpu": 5e8}},
    "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2, "single_submit": true,
            "overlap_events": false}})");
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadConfig::Device::kNvme);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 6);
  EXPECT_EQ(c.zero.offload_param.device, OffloadConfig::Device::kCpu);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 10'000'000);
  EXPECT_EQ(c.zero.offload_param.max_in_cpu, 500'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 2'000'000);
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.queue_depth, 16);
  EXPECT_EQ(c.aio.intra_op_parallelism, 2);  // thread_count is the old name
  EXPECT_TRUE(c.aio.single_submit);
  EXPECT_FALSE(c.aio.overlap_events);
  const DsConfig partial = parse_text(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})");
  EXPECT_DOUBLE_EQ(partial.zero.offload_optimizer.ratio, 0.3);
}

// ZeRO++'s parts zerotrain has: read at stage 3, refused with the key's name elsewhere (DeepSpeed
// wires them into stage 3 only).
TEST(ZeroPlusPlusConfig, StageThreeOnly) {
  EXPECT_FALSE(parse_text(R"({"zero_optimization": {"stage": 3}})").zero.zero_quantized_weights);
  EXPECT_TRUE(parse_text(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true}})")
                  .zero.zero_quantized_weights);
  const std::string e = offload_error(R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": true}})");
  EXPECT_NE(e.find("ds.json: zero_optimization.zero_quantized_weights: needs ZeRO stage 3"), std::string::npos) << e;
  EXPECT_EQ(offload_error(R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": false}})"), "(no error)");
  EXPECT_EQ(parse_text(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})")
                .zero.zero_hpz_partition_size, 8);  // one rank here: min(8, 1) divides it
  std::string h = offload_error(R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 2}})");
  EXPECT_NE(h.find("zero_optimization.zero_hpz_partition_size: needs ZeRO stage 3"), std::string::npos) << h;
  h = offload_error(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})");
  EXPECT_NE(h.find("zero_optimization.zero_hpz_partition_size"), std::string::npos) << h;
  std::string g = offload_error(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})");
  EXPECT_NE(g.find("zero_optimization.zero_quantized_gradients: needs ZeRO stage 3"), std::string::npos) << g;
  g = offload_error(
      R"({"zero_optimization": {"stage": 3, "reduce_scatter": false, "zero_quantized_gradients": true}})");
  EXPECT_NE(g.find("zero_quantized_gradients: needs reduce_scatter: true"), std::string::npos) << g;
  EXPECT_TRUE(parse_text(R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": true}})")
                  .zero.zero_quantized_gradients);
  EXPECT_EQ(parse_text(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2}})").zero.mics_shard_size, 2);
  std::string m = offload_error(R"({"zero_optimization": {"stage": 2, "mics_shard_size": 2}})");
  EXPECT_NE(m.find("zero_optimization.mics_shard_size: needs ZeRO stage 3"), std::string::npos) << m;
  EXPECT_TRUE(parse_text(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2,)"
                         R"( "mics_hierarchical_params_gather": true}})")
                  .zero.mics_hierarchical_params_gather);
  m = offload_error(R"({"zero_optimization": {"stage": 3, "mics_hierarchical_params_gather": true}})");
  EXPECT_NE(m.find("zero_optimization.mics_hierarchical_params_gather: needs mics_shard_size"), std::string::npos)
      << m;
  m = offload_error(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 1, "zero_quantized_weights": true,)"
                    R"( "mics_hierarchical_params_gather": true}})");
  EXPECT_NE(m.find("mics_hierarchical_params_gather: with ZeRO++'s parts"), std::string::npos) << m;
  AutoValues four;
  four.world_size = 4;
  for (const char* bad :
       {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2, "zero_quantized_weights": true}})",
        R"({"zero_optimization": {"stage": 3, "mics_shard_size": 3}})",
        R"({"zero_optimization": {"stage": 3, "mics_shard_size": 2},)"
        R"( "checkpoint": {"use_node_local_storage": true}})"}) {
    try {
      parse_ds_config(boost::json::parse(bad), "ds.json", four);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("mics_shard_size") != std::string::npos ||
                  what.find("checkpoint.use_node_local_storage: with MiCS") != std::string::npos) << what;
    }
  }
  AutoValues six;
  six.world_size = 6;
  const auto hpz = boost::json::parse(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 4}})");
  try {
    parse_ds_config(hpz, "ds.json", six);
    ADD_FAILURE() << "4 ranks a group over 6 ranks accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_hpz_partition_size: 4 does not divide the 6 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(OffloadConfig, RejectsWhatCannotWork) {
  std::string e = offload_error(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  EXPECT_NE(e.find("ds.json: zero_optimization.offload_param: needs ZeRO stage 3"), std::string::npos) << e;
  e = offload_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_NE(e.find("offload_optimizer.nvme_path: device \"nvme\" needs nvme_path"), std::string::npos) << e;
  e = offload_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}})");
  EXPECT_NE(e.find("offload_optimizer.device: must be"), std::string::npos) << e;
  e = offload_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "nvme_pth": "/x"}}})");
  EXPECT_NE(e.find("nvme_pth"), std::string::npos) << e;
  EXPECT_NE(e.find("nvme_path"), std::string::npos) << e;
  e = offload_error(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/x", "ratio": 0.5}}})");
  EXPECT_NE(e.find("offload_optimizer.ratio"), std::string::npos) << e;
  e = offload_error(R"({"aio": {"block_size": 5000}})");
  EXPECT_NE(e.find("aio.block_size: 5000 is not a multiple of 4096"), std::string::npos) << e;
  e = offload_error(R"({"aio": {"intra_op_parallelism": 2, "thread_count": 4}})");
  EXPECT_NE(e.find("aio.thread_count"), std::string::npos) << e;
  e = offload_error(R"({"aio": {"queue_dept": 4}})");
  EXPECT_NE(e.find("queue_depth"), std::string::npos) << e;
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// ---- issue 12: every DeepSpeed 0.19.6 key is implemented, accepted as a no-op, or refused ----

const char* kAllNeutral = ZT_SOURCE_DIR "/tests/data/ds_config_all_neutral.json";

AutoValues demo_autos() {
  AutoValues a;
  a.hidden_size = 64;
  a.max_steps = {3, true};
  return a;
}

// The key path of a notice "<source>: <path>: <what>".
std::string notice_path(const std::string& notice, const std::string& source) {
  const std::string rest = notice.substr(source.size() + 2);
  return rest.substr(0, rest.find(": "));
}

// Every neutral key or block in the fixture, once. Adding a neutral key to the parser without a
// line here (and in the fixture) fails the test, and so does a notice printed twice.
const std::vector<std::string> kNeutralPaths = {
    "prescale_gradients", "gradient_predivide_factor", "gradient_allreduce_op", "sparse_gradients",
    "disable_allgather", "managed_gradient_accumulation", "graph_harvesting", "dump_state", "memory_breakdown",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "sequence_parallel_size", "data_parallel_size",
    "seq_parallel_communication_data_type", "use_data_before_expert_parallelism", "datastates_ckpt", "log_level",
    "dataloader_drop_last", "vocabulary_size", "fp32_allreduce",
    "optimizer.legacy_fusion", "optimizer.params.amsgrad", "optimizer.params.torch_adam",
    "optimizer.params.fp32_optimizer_states", "optimizer.params.set_grad_none",
    "scheduler.params.last_batch_iteration",
    "fp16.auto_cast", "fp16.fp16_master_weights_and_grads",
    "bf16.immediate_grad_update", "bf16.bf16_master_weights_and_grads",
    "bf16.bf16_optimizer_states",
    "data_types.grad_accum_dtype", "data_types.param_dtype", "data_types.buffer_dtype",
    "zero_optimization.offload_optimizer.super_offload", "zero_optimization.offload_optimizer.cpuadam_cores_perc",
    "zero_optimization.use_multi_rank_bucket_allreduce", "zero_optimization.load_from_fp32_weights",
    "zero_optimization.elastic_checkpoint", "zero_optimization.cpu_offload", "zero_optimization.cpu_offload_param",
    "zero_optimization.cpu_offload_use_pin_memory", "zero_optimization.stage3_model_persistence_threshold",
    "zero_optimization.stage3_module_granularity_threshold",
    "zero_optimization.stage3_use_all_reduce_for_fetch_params", "zero_optimization.stage3_allgather_sequential",
    "zero_optimization.ignore_unused_parameters", "zero_optimization.legacy_stage1",
    "zero_optimization.round_robin_gradients", "zero_optimization.memory_efficient_linear",
    "zero_optimization.pipeline_loading_checkpoint", "zero_optimization.override_module_apply",
    "zero_optimization.log_trace_cache_warnings", "zero_optimization.enable_sanity_checks",
    "zero_optimization.save_muon_momentum_buffer_in_memory",
    "zero_optimization.zero_quantized_nontrainable_weights",
    "zero_optimization.zeropp_loco_param",
    "zero_optimization.zenflow", "zero_optimization.leaf_module.classes", "zero_optimization.leaf_module.names",
    "zero_optimization.leaf_module.name_suffixes",
    "aio.use_gds",
    "checkpoint.load_universal", "checkpoint.checkpoint_serialization", "checkpoint.writer",
    "checkpoint.parallel_write.pipeline_stage",
    "wandb.enabled", "comet.enabled", "comms_logger.enabled", "flops_profiler.enabled",
    "timers.throughput.enabled", "timers.throughput.synchronized",
    "activation_checkpointing", "sparse_attention", "pipeline", "eigenvalue",
    "amp.enabled", "torch_autocast.enabled", "autotuning.enabled", "elasticity.enabled", "nebula.enabled",
    "hybrid_engine.enabled", "progressive_layer_drop.enabled", "curriculum_learning.enabled",
    "data_efficiency.enabled", "quantize_training.enabled", "expert_parallel.enabled",
    "weight_quantization.enabled", "compile.deepcompile", "tensor_parallel.autotp_size",
    "compression_training.weight_quantization.shared_parameters.enabled",
    "compression_training.activation_quantization.shared_parameters.enabled",
    "compression_training.sparse_pruning.shared_parameters.enabled",
    "compression_training.row_pruning.shared_parameters.enabled",
    "compression_training.head_pruning.shared_parameters.enabled",
    "compression_training.channel_pruning.shared_parameters.enabled",
    "compression_training.layer_reduction.enabled"};

TEST(DsConfigKeys, AllNeutralFixtureGivesOneNoticePerNeutralKey) {
  const DsConfig c = parse_ds_config(read_json_file(kAllNeutral), kAllNeutral, demo_autos());
  std::map<std::string, int> seen;
  for (const auto& n : c.notices) {
    ASSERT_EQ(n.rfind(std::string(kAllNeutral) + ": ", 0), 0u) << n;
    EXPECT_TRUE(n.find(" accepted; changes nothing here (") != std::string::npos ||
                n.find(" accepted as a performance hint (") != std::string::npos) << n;
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
    ++seen[notice_path(n, kAllNeutral)];
  }
  for (const auto& path : kNeutralPaths) EXPECT_EQ(seen[path], 1) << path;
  for (const auto& [path, count] : seen) {
    EXPECT_NE(std::find(kNeutralPaths.begin(), kNeutralPaths.end(), path), kNeutralPaths.end())
        << "a notice for " << path << " that the test does not expect";
  }
  EXPECT_EQ(c.notices.size(), kNeutralPaths.size());
  // The implemented basics still mean what they say.
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.scheduler.type, SchedulerConfig::Type::kWarmupLR);
  EXPECT_FALSE(c.tensorboard.enabled);
}

TEST(DsConfigKeys, LoadPrintsEachNoticeOnce) {
  testing::internal::CaptureStderr();
  const DsConfig c = load_ds_config(kAllNeutral, demo_autos());
  const std::string err = testing::internal::GetCapturedStderr();
  for (const auto& n : c.notices) {
    size_t count = 0;
    for (size_t at = err.find(n); at != std::string::npos; at = err.find(n, at + 1)) ++count;
    EXPECT_EQ(count, 1u) << n;
  }
  EXPECT_EQ(size_t(std::count(err.begin(), err.end(), '\n')), c.notices.size()) << err;
}

TEST(DsConfigKeys, ParseOnlyCollectsNotices) {
  testing::internal::CaptureStderr();
  const DsConfig c = parse(R"({"prescale_gradients": false, "flops_profiler": {"enabled": false}})");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(c.notices.size(), 2u);
  EXPECT_EQ(c.notices[0], "ds.json: flops_profiler.enabled: false accepted; changes nothing here (the step events "
                          "of metrics.jsonl carry gflops; there is no per-module profile)");
  EXPECT_EQ(c.notices[1], "ds.json: prescale_gradients: false accepted; changes nothing here (gradients are summed "
                          "and divided by the world size after reducing, DeepSpeed's default)");
}

// One config per refused value: the error is one line naming the key path and the value.
struct Refusal {
  const char* config;
  const char* line;  // expected after "ds.json: "
};

const Refusal kRefusals[] = {
    {R"({"prescale_gradients": true})", "prescale_gradients: true is not implemented: "},
    {R"({"gradient_predivide_factor": 2})", "gradient_predivide_factor: 2 is not implemented: "},
    {R"({"gradient_allreduce_op": "sum"})", "gradient_allreduce_op: \"sum\" is not implemented: "},
    {R"({"sparse_gradients": true})", "sparse_gradients: true is not implemented: "},
    {R"({"disable_allgather": true})", "disable_allgather: true is not implemented: "},
    {R"({"managed_gradient_accumulation": false})", "managed_gradient_accumulation: false is not implemented: "},
    {R"({"graph_harvesting": true})", "graph_harvesting: true is not implemented: "},
    {R"({"dump_state": true})", "dump_state: true is not implemented: "},
    {R"({"memory_breakdown": true})", "memory_breakdown: true is not implemented: "},
    {R"({"sequence_parallel_size": 2})", "sequence_parallel_size: 2 is not implemented: "},
    {R"({"data_parallel_size": 4})", "data_parallel_size: 4 is not implemented: data parallelism spans every rank"},
    {R"({"seq_parallel_communication_data_type": "int8"})",
     "seq_parallel_communication_data_type: \"int8\" is not implemented: "},
    {R"({"datastates_ckpt": true})", "datastates_ckpt: true is not implemented: "},
    {R"({"log_level": "info"})", "log_level: \"info\" is not implemented: "},
    {R"({"optimizer": {"type": "AdamW", "legacy_fusion": true}})", "optimizer.legacy_fusion: true is not implemented: "},
    {R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})",
     "optimizer.params.amsgrad: true is not implemented: "},
    {R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
     "optimizer.params.torch_adam: true is not implemented: "},
    {R"({"optimizer": {"type": "AdamW", "params": {"fp32_optimizer_states": false}}})",
     "optimizer.params.fp32_optimizer_states: false is not implemented: "},
    {R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}})",
     "optimizer.params.max_grad_norm: 1.0 is not implemented: DeepSpeed refuses it too; use gradient_clipping"},
    {R"({"optimizer": {"type": "AdamW", "params": {"fused": true}}})", "optimizer.params.fused: true is not implemented: "},
    {R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}}})",
     "scheduler.params.last_batch_iteration: 5 is not implemented: "},
    {R"({"fp16": {"auto_cast": true}})", "fp16.auto_cast: true is not implemented: "},
    {R"({"fp16": {"fp16_master_weights_and_grads": true}})", "fp16.fp16_master_weights_and_grads: true is not implemented: "},
    {R"({"bf16": {"bf16_master_weights_and_grads": true}})", "bf16.bf16_master_weights_and_grads: true is not implemented: "},
    {R"({"bf16": {"bf16_optimizer_states": true}})", "bf16.bf16_optimizer_states: true is not implemented: "},
    {R"({"data_types": {"grad_accum_dtype": "bf16"}})", "data_types.grad_accum_dtype: \"bf16\" is not implemented: "},
    {R"({"data_types": {"param_dtype": "fp16"}})", "data_types.param_dtype: \"fp16\" is not implemented: "},
    {R"({"zero_optimization": {"load_from_fp32_weights": false}})",
     "zero_optimization.load_from_fp32_weights: false is not implemented: "},
    {R"({"zero_optimization": {"elastic_checkpoint": true}})", "zero_optimization.elastic_checkpoint: true is not implemented: "},
    {R"({"zero_optimization": {"cpu_offload": true}})", "zero_optimization.cpu_offload: true is not implemented: "},
    {R"({"zero_optimization": {"cpu_offload_param": true}})", "zero_optimization.cpu_offload_param: true is not implemented: "},
    {R"({"zero_optimization": {"stage3_model_persistence_threshold": 1000}})",
     "zero_optimization.stage3_model_persistence_threshold: 1000 is not implemented: "},
    {R"({"zero_optimization": {"model_persistence_threshold": 1000}})",
     "zero_optimization.model_persistence_threshold: 1000 is not implemented: "},
    {R"({"zero_optimization": {"legacy_stage1": true}})", "zero_optimization.legacy_stage1: true is not implemented: "},
    {R"({"zero_optimization": {"pipeline_loading_checkpoint": true}})",
     "zero_optimization.pipeline_loading_checkpoint: true is not implemented: "},
    {R"({"zero_optimization": {"override_module_apply": false}})",
     "zero_optimization.override_module_apply: false is not implemented: "},
    {R"({"zero_optimization": {"log_trace_cache_warnings": true}})",
     "zero_optimization.log_trace_cache_warnings: true is not implemented: "},
    {R"({"zero_optimization": {"enable_sanity_checks": true}})",
     "zero_optimization.enable_sanity_checks: true is not implemented: "},
    {R"({"zero_optimization": {"zero_quantized_nontrainable_weights": true}})",
     "zero_optimization.zero_quantized_nontrainable_weights: true is not implemented: "},
    {R"({"zero_optimization": {"zeropp_loco_param": {"err_beta": 0.8}}})",
     "zero_optimization.zeropp_loco_param: {\"err_beta\": 0.8} is not implemented: "},
    {R"({"zero_optimization": {"zenflow": {"topk_ratio": 0.1}}})", "zero_optimization.zenflow: {\"topk_ratio\": 0.1} is not implemented: "},
    {R"({"zero_optimization": {"leaf_module": {"names": ["h.0"]}}})",
     "zero_optimization.leaf_module.names: [\"h.0\"] is not implemented: "},
    {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "super_offload": true}}})",
     "zero_optimization.offload_optimizer.super_offload: true is not implemented: "},
    {R"({"aio": {"use_gds": true}})", "aio.use_gds: true is not implemented: "},
    {R"({"checkpoint": {"load_universal": true}})", "checkpoint.load_universal: true is not implemented: "},
    {R"({"timers": {"throughput": {"enabled": false}}})", "timers.throughput.enabled: false is not implemented: "},
    {R"({"timers": {"throughput": {"synchronized": false}}})", "timers.throughput.synchronized: false is not implemented: "},
    {R"({"wandb": {"enabled": true, "project": "p"}})",
     "wandb.enabled: true is not implemented: these machines have no network; use tensorboard or csv_monitor"},
    {R"({"comet": {"enabled": true}})",
     "comet.enabled: true is not implemented: these machines have no network; use tensorboard or csv_monitor"},
    {R"({"comms_logger": {"enabled": true}})", "comms_logger.enabled: true is not implemented: "},
    {R"({"flops_profiler": {"enabled": true}})", "flops_profiler.enabled: true is not implemented: "},
    {R"({"amp": {"enabled": true}})", "amp.enabled: true is not implemented: "},
    {R"({"torch_autocast": {"enabled": true}})", "torch_autocast.enabled: true is not implemented: "},
    {R"({"autotuning": {"enabled": true}})", "autotuning.enabled: true is not implemented: "},
    {R"({"elasticity": {"enabled": true}})", "elasticity.enabled: true is not implemented: "},
    {R"({"nebula": {"enabled": true}})", "nebula.enabled: true is not implemented: "},
    {R"({"hybrid_engine": {"enabled": true}})", "hybrid_engine.enabled: true is not implemented: "},
    {R"({"progressive_layer_drop": {"enabled": true}})", "progressive_layer_drop.enabled: true is not implemented: "},
    {R"({"curriculum_learning": {"enabled": true}})", "curriculum_learning.enabled: true is not implemented: "},
    {R"({"data_efficiency": {"enabled": true}})", "data_efficiency.enabled: true is not implemented: "},
    {R"({"quantize_training": {"enabled": true}})", "quantize_training.enabled: true is not implemented: "},
    {R"({"expert_parallel": {"enabled": true}})", "expert_parallel.enabled: true is not implemented: "},
    {R"({"weight_quantization": {"num_bits": 8}})",
     "weight_quantization.enabled: absent, which DeepSpeed reads as on, is not implemented: "},
    {R"({"weight_quantization": {"enabled": true}})", "weight_quantization.enabled: true is not implemented: "},
    {R"({"compile": {"deepcompile": true}})", "compile.deepcompile: true is not implemented: "},
    {R"({"tensor_parallel": {"autotp_size": 2}})", "tensor_parallel.autotp_size: 2 is not implemented: "},
    {R"({"compression_training": {"head_pruning": {"shared_parameters": {"enabled": true}}}})",
     "compression_training.head_pruning.shared_parameters.enabled: true is not implemented: "},
    {R"({"compression_training": {"layer_reduction": {"enabled": true}}})",
     "compression_training.layer_reduction.enabled: true is not implemented: "},
};

TEST(DsConfigKeys, RefusedValuesNameKeyAndValue) {
  for (const auto& r : kRefusals) {
    const std::string e = error_of(r.config);
    EXPECT_EQ(e.rfind(cat("ds.json: ", r.line), 0), 0u) << r.config << "\n  got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(DsConfigKeys, WrongKindOfValueSaysWhatIsExpected) {
  std::string e = error_of(R"({"prescale_gradients": "no"})");
  EXPECT_EQ(e, "ds.json: prescale_gradients: expected a value like false, got \"no\"");
  e = error_of(R"({"flops_profiler": {"enabled": "yes"}})");
  EXPECT_EQ(e, "ds.json: flops_profiler.enabled: \"yes\" is not implemented: the step events of metrics.jsonl "
               "carry gflops; there is no per-module profile");
  e = error_of(R"({"zero_allow_untested_optimizer": "auto"})");
  EXPECT_NE(e.find("zero_allow_untested_optimizer: \"auto\" is not supported"), std::string::npos) << e;
}

// Keys that steer only DeepSpeed's speed (issue 29): every value of the right kind runs, with one
// notice saying what zerotrain does instead; a value of another kind is still refused.
TEST(DsConfigKeys, PerformanceHintsAcceptEveryValue) {
  const std::vector<std::pair<std::string, std::string>> hints = {
      {"round_robin_gradients", "true"},          {"use_multi_rank_bucket_allreduce", "false"},
      {"stage3_module_granularity_threshold", "100"}, {"stage3_use_all_reduce_for_fetch_params", "true"},
      {"stage3_allgather_sequential", "true"},    {"memory_efficient_linear", "false"},
      {"module_granularity_threshold", "7"},      {"allgather_sequential", "true"}};
  for (const auto& [key, value] : hints) {
    const DsConfig c = parse(cat(R"({"zero_optimization": {"stage": 2, ")", key, R"(": )", value, "}}"));
    ASSERT_EQ(c.notices.size(), 1u) << key;
    EXPECT_EQ(c.notices[0].rfind(cat("ds.json: zero_optimization.", key, ": ", value, " accepted as a performance hint ("), 0), 0u)
        << c.notices[0];
    EXPECT_EQ(c.notices[0].find('\n'), std::string::npos);
    const std::string wrong = value == "true" || value == "false" ? "\"yes\"" : "true";
    EXPECT_EQ(error_of(cat(R"({"zero_optimization": {")", key, R"(": )", wrong, "}}")).rfind(
                  cat("ds.json: zero_optimization.", key, ": expected a value like "), 0), 0u) << key;
  }
  // The HF guide's ZeRO-2 example (docs/source/en/deepspeed.md) as it is, round_robin_gradients
  // and CPU offload included.
  const std::string hf_zero2 = cat(ZT_SOURCE_DIR, "/tests/data/ds_config_hf_zero2.json");
  const DsConfig c = parse_ds_config(read_json_file(hf_zero2), hf_zero2, demo_autos());
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadConfig::Device::kCpu);
}

TEST(DsConfigKeys, TyposSuggestTheClosestKeyAtEveryLevel) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prescale_gradient": false})", "prescale_gradient: unknown key; did you mean 'prescale_gradients'?"},
      {R"({"zero_optimization": {"zero_quantized_gradient": false}})",
       "zero_optimization.zero_quantized_gradient: unknown key; did you mean "
       "'zero_optimization.zero_quantized_gradients'?"},
      {R"({"zero_optimization": {"leaf_module": {"name": []}}})",
       "zero_optimization.leaf_module.name: unknown key; did you mean 'zero_optimization.leaf_module.names'?"},
      {R"({"flops_profiler": {"enabled": false, "profil_step": 1}})",
       "flops_profiler.profil_step: unknown key; did you mean 'flops_profiler.profile_step'?"},
      {R"({"wandb": {"enabled": false, "projet": "x"}})",
       "wandb.projet: unknown key; did you mean 'wandb.project'?"},
      {R"({"activation_checkpointing": {"partitioned_activations": true}})",
       "activation_checkpointing.partitioned_activations: unknown key; did you mean "
       "'activation_checkpointing.partition_activations'?"},
      {R"({"data_efficiency": {"data_sampling": {"num_epoch": 1}}})",
       "data_efficiency.data_sampling.num_epoch: unknown key; did you mean "
       "'data_efficiency.data_sampling.num_epochs'?"},
      {R"({"compression_training": {"sparse_pruning": {"shared_parameters": {"dense_ration": 0.5}}}})",
       "compression_training.sparse_pruning.shared_parameters.dense_ration: unknown key; did you mean "
       "'compression_training.sparse_pruning.shared_parameters.dense_ratio'?"},
      {R"({"checkpoint": {"writer": {"typ": "fast"}}})",
       "checkpoint.writer.typ: unknown key; did you mean 'checkpoint.writer.type'?"},
      {R"({"tensorboard": {"output_pth": "tb"}})",
       "tensorboard.output_pth: unknown key; did you mean 'tensorboard.output_path'?"},
      {R"({"timers": {"throughput": {"enable": true}}})",
       "timers.throughput.enable: unknown key; did you mean 'timers.throughput.enabled'?"},
      {R"({"comms_loger": {"enabled": false}})", "comms_loger: unknown key; did you mean 'comms_logger'?"},
  };
  for (const auto& [config, line] : cases) EXPECT_EQ(error_of(config), cat("ds.json: ", line)) << config;
}

TEST(DsConfigKeys, MonitorBlocks) {
  DsConfig c = parse(R"({"tensorboard": {"enabled": true, "output_path": "runs", "job_name": "demo"},
                         "csv_monitor": {"enabled": true}})");
  EXPECT_TRUE(c.tensorboard.enabled);
  EXPECT_EQ(c.tensorboard.output_path, "runs");
  EXPECT_EQ(c.tensorboard.job_name, "demo");
  EXPECT_TRUE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.output_path, "");  // DeepSpeed's defaults
  EXPECT_EQ(c.csv_monitor.job_name, "DeepSpeedJobName");
  EXPECT_TRUE(c.notices.empty());  // implemented keys give no notice
  c = parse("{}");
  EXPECT_FALSE(c.tensorboard.enabled);
  EXPECT_FALSE(c.csv_monitor.enabled);
  c = parse(R"({"wandb": {"enabled": false, "team": "t", "group": "g", "project": "p"}})");
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_EQ(c.notices[0].rfind("ds.json: wandb.enabled: false accepted; changes nothing here", 0), 0u) << c.notices[0];
  for (const char* off : {R"({"comet": {"project": "p"}})", R"({"comet": {"enabled": null}})"}) {
    c = parse(off);  // enabled absent or null: DeepSpeed's default, off
    ASSERT_EQ(c.notices.size(), 1u) << off;
    EXPECT_EQ(c.notices[0].rfind("ds.json: comet: accepted with enabled absent (off)", 0), 0u) << c.notices[0];
  }
}

TEST(DsConfigKeys, SchedulerEdgeValuesFollowDeepSpeed) {
  // DeepSpeed's schedules raise ValueError for warmup_num_steps 0.
  EXPECT_EQ(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})"),
            "ds.json: scheduler.params.warmup_num_steps: must be >= 1, got 0");
  EXPECT_NE(error_of(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 9, "warmup_num_steps": 0}}})")
                .find("warmup_num_steps: must be >= 1"),
            std::string::npos);
  // "auto" takes --warmup_steps as given, 0 included (the schedule then warms up as with 1).
  AutoValues a;
  a.warmup_steps = {0, false};
  EXPECT_EQ(parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}})", a)
                .scheduler.warmup_num_steps,
            0);
  // WarmupDecayLR's own default warmup_max_lr is 0.001; WarmupLR's is the optimizer's lr.
  a.learning_rate = {0.5, true};
  EXPECT_DOUBLE_EQ(*parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 9}}})", a)
                        .scheduler.warmup_max_lr,
                   0.001);
  EXPECT_FALSE(parse(R"({"scheduler": {"type": "WarmupLR"}})", a).scheduler.warmup_max_lr.has_value());
  // OneCycle may have an empty second half.
  EXPECT_EQ(*parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0, "cycle_max_lr": 1,
                                                                     "cycle_second_step_size": 0}}})")
                 .scheduler.cycle_second_step_size,
            0);
}

TEST(DsConfigKeys, OtherNamesDeepSpeedAccepts) {
  // pydantic field names next to the stage3_* aliases, and bf16's old name.
  DsConfig c = parse(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1234, "max_live_parameters": 99,
                                               "param_persistence_threshold": 7}})");
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 1234);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 99);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 7);
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 1}})"),
            "ds.json: zero_optimization.prefetch_bucket_size: is another name of stage3_prefetch_bucket_size; give one "
            "of them");
  EXPECT_TRUE(parse(R"({"bfloat16": {"enabled": true}})").bf16);
  EXPECT_NE(error_of(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})").find("bfloat16: is the old name"),
            std::string::npos);
  // DeepSpeed upper-cases tag_validation.
  EXPECT_NO_THROW(parse(R"({"checkpoint": {"tag_validation": "fail"}})"));
  // data_types that name the dtype in use are accepted.
  AutoValues bf;
  bf.bf16 = {true, true};
  const DsConfig bf16_accum =
      parse(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "torch.bfloat16"}})", bf);
  EXPECT_EQ(bf16_accum.grad_dtype(), DType::kBF16);  // stage 0's default would be fp32
  EXPECT_TRUE(bf16_accum.notices.empty());
  EXPECT_EQ(parse(R"({"bf16": {"enabled": true}, "data_types": {"param_dtype": "bf16"}})", bf).notices.size(), 1u);
}

// DeepSpeed's engine.get_data_types: bf16 without ZeRO accumulates gradients in fp32 (its
// BF16_Optimizer), every other run in the parameters' dtype; an explicit fp32 with bf16 is
// BF16_Optimizer at stage 1 too, unless the optimizer is offloaded.
TEST(DsConfig, GradAccumDtypeFollowsDeepSpeed) {
  AutoValues bf;
  bf.bf16 = {true, true};
  auto grads = [&](const std::string& zero, const std::string& data_types = "{}") {
    return parse(R"({"bf16": {"enabled": true}, "zero_optimization": )" + zero + R"(, "data_types": )" +
                     data_types + "}",
                 bf)
        .grad_dtype();
  };
  EXPECT_EQ(grads(R"({"stage": 0})"), DType::kF32);
  EXPECT_EQ(grads(R"({"stage": 1})"), DType::kBF16);
  EXPECT_EQ(grads(R"({"stage": 2})"), DType::kBF16);
  EXPECT_EQ(grads(R"({"stage": 3})"), DType::kBF16);
  EXPECT_EQ(grads(R"({"stage": 1})", R"({"grad_accum_dtype": "fp32"})"), DType::kF32);
  EXPECT_EQ(grads(R"({"stage": 0})", R"({"grad_accum_dtype": null})"), DType::kF32);
  EXPECT_EQ(parse(R"({"fp16": {"enabled": true}})").grad_dtype(), DType::kF16);
  EXPECT_EQ(parse("{}").grad_dtype(), DType::kF32);
  const std::string refused = "ds.json: data_types.grad_accum_dtype: \"fp32\" is not implemented: ";
  for (const char* zero : {R"({"stage": 2})", R"({"stage": 3})",
                           R"({"stage": 1, "offload_optimizer": {"device": "cpu"}})"}) {
    const std::string text = std::string(R"({"bf16": {"enabled": true}, "zero_optimization": )") + zero +
                             R"(, "data_types": {"grad_accum_dtype": "fp32"}})";
    EXPECT_EQ(error_of(text, bf).rfind(refused, 0), 0u) << zero << ": " << error_of(text, bf);
  }
  EXPECT_EQ(error_of(R"({"fp16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}})").rfind(refused, 0),
            0u);
}

// Adafactor's routes: HF's --optim adafactor with --optim_args, DeepSpeed's block (torch.optim's keys).
TEST(AdafactorConfig, HfOptimAdafactorIsTransformersAsHfTrainerBuildsIt) {
  AutoValues a;
  a.optim = {"adafactor", true};
  a.learning_rate = {3e-4, true};
  a.weight_decay = {0.01, true};
  const OptimizerConfig o = parse("{}", a).optimizer;
  EXPECT_EQ(o.type, OptimizerConfig::Type::kAdafactor);
  EXPECT_FALSE(o.adafactor_torch);
  EXPECT_FALSE(o.relative_step);
  EXPECT_FALSE(o.scale_parameter);
  EXPECT_DOUBLE_EQ(o.lr, 3e-4);
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(o.adafactor_eps1, 1e-30);
  EXPECT_DOUBLE_EQ(o.adafactor_eps2, 1e-3);
  EXPECT_DOUBLE_EQ(o.clip_threshold, 1.0);
  EXPECT_DOUBLE_EQ(o.decay_rate, -0.8);
  EXPECT_FALSE(o.adafactor_beta1.has_value());
  EXPECT_FALSE(o.has_exp_avg());
  EXPECT_TRUE(o.has_exp_avg_sq());
  EXPECT_EQ(o.moment_count(), 0);
  // --optim_args: transformers' keyword arguments.
  a.learning_rate = {5e-5, false};
  a.optim_args = {"relative_step=True, scale_parameter=True,warmup_init=True,beta1=0.9,clip_threshold=2,decay_rate=-0.5",
                  true};
  const OptimizerConfig r = parse("{}", a).optimizer;
  EXPECT_TRUE(r.relative_step && r.scale_parameter && r.warmup_init);
  EXPECT_DOUBLE_EQ(r.adafactor_beta1.value_or(0), 0.9);
  EXPECT_DOUBLE_EQ(r.clip_threshold, 2.0);
  EXPECT_DOUBLE_EQ(r.decay_rate, -0.5);
  EXPECT_TRUE(r.has_exp_avg());
  EXPECT_EQ(r.moment_count(), 1);
}

TEST(AdafactorConfig, BadOptimArgsAreRefusedNamingTheKey) {
  AutoValues a;
  a.optim = {"adafactor", true};
  const auto refused = [&](const std::string& args, const std::string& want) {
    a.optim_args = {args, true};
    const std::string e = error_of("{}", a);
    EXPECT_NE(e.find(want), std::string::npos) << args << ": " << e;
  };
  refused("relative_stp=True", "'relative_stp' is not an Adafactor argument here; did you mean 'relative_step'?");
  refused("beta1=1.5", "--optim_args: beta1=1.5: expected a number in [0, 1]");
  refused("scale_parameter=yes", "scale_parameter=yes: expected True or False");
  refused("warmup_init=True", "warmup_init=True requires relative_step=True");
  refused("decay_rate=0.5", "decay_rate=0.5: expected a number");
  refused("beta1=0.9,beta1=0.8", "beta1 twice");
  a.optim_args = {"relative_step=True", true};
  a.learning_rate = {1e-3, true};
  EXPECT_NE(error_of("{}", a).find("Cannot combine manual lr and relative_step=True"), std::string::npos);
  // With another optimizer, or beside an optimizer block.
  a.optim = {"adamw_torch", true};
  EXPECT_NE(error_of("{}", a).find("--optim_args is implemented for --optim adafactor only"), std::string::npos);
  a.optim = {"adamw_torch", false};
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW"}})", a).find("--optim_args with an optimizer block"),
            std::string::npos);
}

TEST(AdafactorConfig, DeepSpeedsBlockIsTorchOptimAdafactor) {
  const OptimizerConfig o = parse(R"({"optimizer": {"type": "Adafactor", "params": {"lr": 0.01,
      "beta2_decay": -0.7, "eps": [null, 0.002], "d": 2.0, "weight_decay": 0.1, "foreach": true}}})").optimizer;
  EXPECT_EQ(o.type, OptimizerConfig::Type::kAdafactor);
  EXPECT_TRUE(o.adafactor_torch && o.relative_step && o.scale_parameter);
  EXPECT_DOUBLE_EQ(o.decay_rate, -0.7);
  EXPECT_DOUBLE_EQ(o.adafactor_eps1, 1.1920928955078125e-07);  // null: float32's epsilon
  EXPECT_DOUBLE_EQ(o.adafactor_eps2, 0.002);
  EXPECT_DOUBLE_EQ(o.clip_threshold, 2.0);
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(parse(R"({"optimizer": {"type": "adafactor", "params": {"eps": [1e-20, 0.001]}}})")
                       .optimizer.adafactor_eps1, 1e-20);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Adafactor", "params": {"beta2_decay": 0.5}}})")
                .find("optimizer.params.beta2_decay"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Adafactor", "params": {"eps": [0.1]}}})")
                .find("optimizer.params.eps: expected [eps1, eps2]"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Adafactor", "params": {"d": 0.5}}})").find("optimizer.params.d"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Adafactor", "params": {"maximize": true}}})")
                .find("optimizer.params.maximize"), std::string::npos);
  // transformers' keys are not torch's: DeepSpeed would hand them to torch.optim.Adafactor, which refuses them.
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Adafactor", "params": {"scale_parameter": true}}})")
                .find("optimizer.params.scale_parameter"), std::string::npos);
}

// DeepSpeed 0.19.6's OneBitAdam block: OnebitAdam's keyword arguments; no bias correction (it
// takes the key and never applies it); refused under ZeRO, as DeepSpeed asserts.
TEST(OneBitAdamConfig, DeepSpeedsBlock) {
  const OptimizerConfig o = parse(R"({"optimizer": {"type": "OneBitAdam", "params": {"lr": 2e-4,
      "freeze_step": 400, "betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.01, "bias_correction": true,
      "eps_inside_sqrt": false, "cuda_aware": false, "comm_backend_name": "nccl"}}})").optimizer;
  EXPECT_EQ(o.type, OptimizerConfig::Type::kOneBitAdam);
  EXPECT_STREQ(optimizer_name(o.type), "OneBitAdam");
  EXPECT_EQ(o.freeze_step, 400);
  EXPECT_DOUBLE_EQ(o.lr, 2e-4);
  EXPECT_DOUBLE_EQ(o.beta1, 0.8);
  EXPECT_DOUBLE_EQ(o.beta2, 0.99);
  EXPECT_DOUBLE_EQ(o.eps, 1e-7);
  EXPECT_FALSE(o.bias_correction);
  EXPECT_EQ(parse(R"({"optimizer": {"type": "onebitadam"}})").optimizer.freeze_step, 100000);  // OnebitAdam's default
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}})")
                .find("zero_optimization.stage: 2 with optimizer OneBitAdam: 1-bit Adam is not compatible with ZeRO"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"amsgrad": true}}})")
                .find("optimizer.params.amsgrad"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"comm_backend_name": "gloo"}}})")
                .find("optimizer.params.comm_backend_name"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"freeze_step": -1}}})")
                .find("optimizer.params.freeze_step"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"max_grad_norm": 1.0}}})")
                .find("optimizer.params.max_grad_norm"), std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"var_freeze_step": 10}}})")
                .find("optimizer.params.var_freeze_step"), std::string::npos);  // ZeroOneAdam's key
}

// Compression starts after the step at which the count reaches freeze_step, never before step 3
// (DeepSpeed's first step only sets up; its freeze check runs from the second).
TEST(OneBitAdamConfig, CompressedSteps) {
  OptimizerConfig o;
  o.type = OptimizerConfig::Type::kOneBitAdam;
  o.freeze_step = 4;
  for (int64_t t = 1; t <= 4; ++t) EXPECT_FALSE(onebit_compressed(o, t)) << t;
  EXPECT_TRUE(onebit_compressed(o, 5));
  for (int64_t f : {0, 1, 2}) {
    o.freeze_step = f;
    EXPECT_FALSE(onebit_compressed(o, 2)) << f;
    EXPECT_TRUE(onebit_compressed(o, 3)) << f;
  }
  o.type = OptimizerConfig::Type::kAdamW;
  EXPECT_FALSE(onebit_compressed(o, 100));
}

TEST(ZeroOneAdamConfig, DeepSpeedsBlock) {
  const OptimizerConfig o = parse(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"lr": 2e-4,
      "var_freeze_step": 300, "var_update_scaler": 8, "local_step_scaler": 1000, "local_step_clipper": 4,
      "betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.01, "bias_correction": true, "cuda_aware": false,
      "comm_backend_name": "mpi"}}})").optimizer;
  EXPECT_EQ(o.type, OptimizerConfig::Type::kZeroOneAdam);
  EXPECT_STREQ(optimizer_name(o.type), "ZeroOneAdam");
  EXPECT_TRUE(o.onebit());
  EXPECT_EQ(o.var_freeze_step, 300);
  EXPECT_EQ(o.var_update_scaler, 8);
  EXPECT_EQ(o.local_step_scaler, 1000);
  EXPECT_EQ(o.local_step_clipper, 4);
  EXPECT_DOUBLE_EQ(o.beta1, 0.8);
  EXPECT_FALSE(o.bias_correction);
  // zoadam.py's defaults.
  const OptimizerConfig d = parse(R"({"optimizer": {"type": "zerooneadam"}})").optimizer;
  EXPECT_EQ(d.var_freeze_step, 100000);
  EXPECT_EQ(d.var_update_scaler, 16);
  EXPECT_EQ(d.local_step_scaler, 32678);
  EXPECT_EQ(d.local_step_clipper, 16);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "ZeroOneAdam"}, "zero_optimization": {"stage": 1}})")
                .find("zero_optimization.stage: 1 with optimizer ZeroOneAdam: 0/1 Adam is not compatible with ZeRO"),
            std::string::npos);
  for (const char* key : {"var_update_scaler", "local_step_scaler", "local_step_clipper"}) {
    EXPECT_NE(error_of(cat(R"({"optimizer": {"type": "ZeroOneAdam", "params": {")", key, R"(": 0}}})"))
                  .find(cat("optimizer.params.", key)),
              std::string::npos)
        << key;
  }
  EXPECT_NE(error_of(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"amsgrad": true}}})")
                .find("optimizer.params.amsgrad: true is not implemented: ZeroOneAdam raises for it"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "ZeroOneAdam", "params": {"freeze_step": 10}}})")
                .find("optimizer.params.freeze_step"), std::string::npos);  // OnebitAdam's key
}

// DeepSpeed 0.19.6's OneBitLamb block: OnebitLamb's keyword arguments (its defaults), the 1-bit
// optimizers' shared keys, and what DeepSpeed refuses: ZeRO, and (for Lamb too) fp16 with a
// static loss scale.
TEST(OneBitLambConfig, DeepSpeedsBlock) {
  const OptimizerConfig o = parse(R"({"optimizer": {"type": "OneBitLamb", "params": {"lr": 2e-4,
      "freeze_step": 23, "betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.01, "max_coeff": 0.3,
      "min_coeff": 0.02, "coeff_beta": 0.8, "factor_max": 3.0, "factor_min": 0.6, "factor_threshold": 0.2,
      "bias_correction": true, "eps_inside_sqrt": true, "cuda_aware": false, "comm_backend_name": "nccl"}}})")
                                  .optimizer;
  EXPECT_EQ(o.type, OptimizerConfig::Type::kOneBitLamb);
  EXPECT_STREQ(optimizer_name(o.type), "OneBitLamb");
  EXPECT_TRUE(o.onebit());
  EXPECT_TRUE(o.has_exp_avg_sq_fresh());
  EXPECT_EQ(o.freeze_step, 23);
  EXPECT_DOUBLE_EQ(o.max_coeff, 0.3);
  EXPECT_DOUBLE_EQ(o.min_coeff, 0.02);
  EXPECT_DOUBLE_EQ(o.coeff_beta, 0.8);
  EXPECT_DOUBLE_EQ(o.factor_max, 3.0);
  EXPECT_DOUBLE_EQ(o.factor_min, 0.6);
  EXPECT_DOUBLE_EQ(o.factor_threshold, 0.2);
  EXPECT_FALSE(o.bias_correction);
  EXPECT_FALSE(o.eps_inside_sqrt);  // taken and never read
  // lamb.py's defaults.
  const OptimizerConfig d = parse(R"({"optimizer": {"type": "onebitlamb"}})").optimizer;
  EXPECT_EQ(d.freeze_step, 100000);
  EXPECT_DOUBLE_EQ(d.max_coeff, 10.0);
  EXPECT_DOUBLE_EQ(d.min_coeff, 0.01);
  EXPECT_DOUBLE_EQ(d.coeff_beta, 0.9);
  EXPECT_DOUBLE_EQ(d.factor_max, 4.0);
  EXPECT_DOUBLE_EQ(d.factor_min, 0.5);
  EXPECT_DOUBLE_EQ(d.factor_threshold, 0.1);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "OneBitLamb"}, "zero_optimization": {"stage": 3}})")
                .find("zero_optimization.stage: 3 with optimizer OneBitLamb: 1-bit Lamb is not compatible with ZeRO"),
            std::string::npos);
  for (const char* type : {"OneBitLamb", "Lamb"}) {
    EXPECT_NE(error_of(cat(R"({"optimizer": {"type": ")", type,
                           R"("}, "fp16": {"enabled": true, "loss_scale": 128}, "zero_optimization": {"stage": 0}})"))
                  .find(cat("fp16.loss_scale: 128 (static) with optimizer ", type, ": DeepSpeed's ", type,
                            " requires dynamic loss scaling")),
              std::string::npos)
        << type;
    EXPECT_EQ(parse(cat(R"({"optimizer": {"type": ")", type,
                        R"("}, "fp16": {"enabled": true}, "zero_optimization": {"stage": 0}})"))
                  .optimizer.type,
              type == std::string("Lamb") ? OptimizerConfig::Type::kLamb : OptimizerConfig::Type::kOneBitLamb);
  }
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"("coeff_beta": 1.0)", "optimizer.params.coeff_beta: must be below 1"},
      {R"("coeff_beta": -0.1)", "optimizer.params.coeff_beta"},
      {R"("factor_min": 5.0)", "optimizer.params.factor_min: 5 is above factor_max (4)"},
      {R"("factor_threshold": -0.1)", "optimizer.params.factor_threshold"},
      {R"("min_coeff": 20.0)", "optimizer.params.min_coeff: 20 is above max_coeff (10)"},
      {R"("freeze_step": -1)", "optimizer.params.freeze_step"},
      {R"("amsgrad": true)", "optimizer.params.amsgrad: true is not implemented: OnebitLamb raises for it"},
      {R"("var_freeze_step": 5)", "optimizer.params.var_freeze_step"},  // ZeroOneAdam's key
  };
  for (const auto& [params, want] : bad) {
    const std::string e = error_of(cat(R"({"optimizer": {"type": "OneBitLamb", "params": {)", params, "}}}"));
    EXPECT_NE(e.find(want), std::string::npos) << params << ": " << e;
  }
}

// zoadam.py's counters, kept step by step as it keeps them, against the closed forms the engine
// asks at any step (a resume included).
TEST(ZeroOneAdamConfig, PhasesFollowDeepSpeedsCounters) {
  struct Case {
    int64_t var_freeze, var_scaler, local_scaler, clipper;
  };
  for (const Case c : {Case{100000, 16, 32678, 16}, Case{6, 2, 1, 2}, Case{0, 1, 1, 3}, Case{40, 3, 2, 16},
                       Case{1, 16, 5, 5}, Case{200, 1, 3, 7}}) {
    OptimizerConfig o;
    o.type = OptimizerConfig::Type::kZeroOneAdam;
    o.var_freeze_step = c.var_freeze;
    o.var_update_scaler = c.var_scaler;
    o.local_step_scaler = c.local_scaler;
    o.local_step_clipper = c.clipper;
    int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
    bool freeze = false;
    for (int64_t step = 1; step <= 600; ++step) {
      const ZeroOnePhase phase = zero_one_phase(o, step);
      SCOPED_TRACE(cat("var_freeze_step ", c.var_freeze, ", scalers ", c.var_scaler, "/", c.local_scaler, ", clipper ",
                       c.clipper, ", step ", step));
      if (step == 1) {  // DeepSpeed's initialisation step returns before any counter moves
        EXPECT_EQ(phase, ZeroOnePhase::kSetUp);
        continue;
      }
      if (!freeze) {
        EXPECT_EQ(zero_one_var_interval(o, step), var_interval);
        EXPECT_EQ(phase, step % var_interval == 0 ? ZeroOnePhase::kVariance : ZeroOnePhase::kCompressedGrad);
        EXPECT_EQ(local_gradients(o, step), step % var_interval != 0);
        if (step % var_interval == 0 && ++var_counter == c.var_scaler) {
          var_counter = 0;
          var_interval *= 2;
        }
      } else {
        EXPECT_EQ(phase, ZeroOnePhase::kLocal);
        EXPECT_TRUE(local_gradients(o, step));
        EXPECT_EQ(zero_one_local_interval(o, step), local_interval);
        if (++local_counter == c.local_scaler) {
          local_counter = 0;
          local_interval = std::min(c.clipper, local_interval * 2);
        }
      }
      if (step > c.var_freeze) freeze = true;
    }
  }
}

}  // namespace
}  // namespace zt
