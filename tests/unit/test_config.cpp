// The DeepSpeed config reader: every error class names its key (or line and column), "auto"
// resolution, the batch-size arithmetic, and every shipped config loads.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <filesystem>

#include "config/ds_config.h"
#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/train_args.h"
#include "core/error.h"

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
  EXPECT_NE(e.find("gradient_clippin: unknown key; the closest known key is 'gradient_clipping'"), std::string::npos) << e;
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
  EXPECT_NE(e.find("flops_profiler: DeepSpeed key not implemented by zerotrain"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "Lamb"}})");
  EXPECT_NE(e.find("'Lamb' is not implemented"), std::string::npos) << e;
  e = error_of(R"({"optimizer": {"type": "AdamX"}})");
  EXPECT_NE(e.find("unknown optimizer 'AdamX'"), std::string::npos) << e;
  e = error_of(R"({"scheduler": {"type": "WarmupCosine"}})");
  EXPECT_NE(e.find("closest known is 'WarmupCosineLR'"), std::string::npos) << e;
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
  EXPECT_EQ(c.zero.reduce_bucket_size, 64 * 64);
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
  EXPECT_NE(error(R"({"n_layers": 2})").find("closest known key is 'n_layer'"), std::string::npos);
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
