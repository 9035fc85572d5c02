// The self-profile (--profile_steps): ProfiledKernels on the CPU backend times a real training
// step by op class without changing a bit of it, and StepProfiler reports the profiled steps.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/profiled_kernels.h"
#include "comm/data_comm.h"
#include "comm/self_comm.h"
#include "model/causal_lm.h"
#include "tiny_models.h"
#include "train/metrics.h"
#include "train/step_profile.h"
#include "zero/engine.h"

namespace zt {
namespace {

using testing::tiny_gpt2;
using testing::tiny_llama;

DsConfig config(bool bf16) {
  DsConfig c;
  c.train_micro_batch_size_per_gpu = 2;
  c.train_batch_size = 2;
  c.optimizer.lr = 1e-2;
  c.gradient_clipping = 1.0;
  c.bf16 = bf16;
  return c;
}

constexpr int kBatch = 2, kSeq = 16, kSteps = 2;

struct Run {
  std::vector<double> losses;
  std::vector<float> master;    // the weights after the last step
  std::vector<StepTimes> times;  // each step's, when profiled
};

// kSteps steps of `model`, over the backend's table or, when `profile`, the decorated one with
// every step profiled and the engine's step bracketed as the trainer brackets it.
template <typename T>
Run train(const ModelConfig& model_config, bool profile) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model_config);
  SelfComm comm;
  auto data_comm = make_data_comm(*backend, comm);
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  ZeroEngine engine(*layout, *backend, *data_comm, comm, config(kBf16), kBf16 ? DType::kBF16 : DType::kF32);
  engine.init_params(1);
  OpTimeline timeline(*backend);
  std::unique_ptr<KernelOps<T>> profiled;
  if (profile) profiled = make_profiled_kernels(backend->kernels<T>(), timeline);
  const auto model = make_causal_lm<T>(*layout, *backend, profile ? *profiled : backend->kernels<T>(), kBatch, kSeq,
                                       false);
  Run run;
  std::vector<int32_t> in(size_t(kBatch) * kSeq), tg(in.size());
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t((i * 7 + size_t(step)) % 64);
      tg[i] = int32_t((i * 7 + size_t(step) + 1) % 64);
    }
    if (profile) timeline.begin_step();
    model->forward(engine.params<T>(), in.data(), tg.data(), kBatch, kSeq);
    model->backward(engine.params<T>(), engine.backward_scale());
    if (profile) timeline.begin(OpClass::kOptimizer);
    engine.step();
    if (profile) timeline.end();
    run.losses.push_back(model->take_loss());
    if (profile) run.times.push_back(timeline.end_step());
  }
  run.master = engine.gather_master_weights();
  return run;
}

void expect_step_times(const StepTimes& t, const std::string& what) {
  for (OpClass c : {OpClass::kGemm, OpClass::kAttention, OpClass::kNorm, OpClass::kClassifier, OpClass::kElementwise,
                    OpClass::kOptimizer}) {
    EXPECT_GT(t.calls[size_t(c)], 0) << what << ": " << op_class_name(c) << " ran";
    EXPECT_GE(t.ms[size_t(c)], 0.0) << what << ": " << op_class_name(c);
  }
  EXPECT_EQ(t.calls[size_t(OpClass::kOptimizer)], 1) << what;
  // Nothing bracketed the collectives here (the trainer's communicator does): none counted.
  EXPECT_EQ(t.calls[size_t(OpClass::kCommunication)], 0) << what;
  EXPECT_EQ(t.ms[size_t(OpClass::kCommunication)], 0.0) << what;
  const double sum = std::accumulate(t.ms.begin(), t.ms.end(), 0.0);
  EXPECT_GT(sum, 0.0) << what;
  EXPECT_LE(sum, t.wall_ms) << what << ": the classes' time fits in the step's wall time";
}

template <typename T>
void check_profiled_step(const ModelConfig& model, const std::string& what) {
  const Run plain = train<T>(model, false), profiled = train<T>(model, true);
  ASSERT_EQ(profiled.times.size(), size_t(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    expect_step_times(profiled.times[size_t(s)], what + " step " + std::to_string(s + 1));
  }
  EXPECT_EQ(profiled.times[0].calls, profiled.times[1].calls) << what << ": every step makes the same calls";
  // Bit for bit: the losses of both steps (the second after the first update) and the weights.
  EXPECT_EQ(plain.losses, profiled.losses) << what;
  ASSERT_EQ(plain.master.size(), profiled.master.size());
  EXPECT_EQ(std::memcmp(plain.master.data(), profiled.master.data(), plain.master.size() * sizeof(float)), 0)
      << what << ": the decorated table changed the weights";
}

TEST(ProfiledKernels, TimesAGpt2StepByClassAndChangesNothing) { check_profiled_step<float>(tiny_gpt2(), "gpt2 fp32"); }

TEST(ProfiledKernels, TimesALlamaStepByClassAndChangesNothing) {
  check_profiled_step<float>(tiny_llama(), "llama fp32");
}

TEST(ProfiledKernels, TimesABf16StepByClassAndChangesNothing) {
  check_profiled_step<bf16>(tiny_gpt2(), "gpt2 bf16");
  check_profiled_step<bf16>(tiny_llama(), "llama bf16");
}

// Brackets nest: a bracket's time is its own, its children's excluded, and nothing is lost. Time
// on a shared machine may stretch, so the check is the accounting: the optimizer's own time plus
// the nested wait's fit in the outer bracket's span as the host saw it (counting the wait twice
// would exceed it by the wait's 5 ms or more).
TEST(OpTimeline, NestedBracketsCountOnlyTheirOwnTime) {
  auto backend = make_cpu_backend();
  OpTimeline timeline(*backend);
  auto spin = [](double ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  for (int round = 0; round < 2; ++round) {  // the second round reuses the first one's events
    timeline.begin_step();
    const auto outer_start = std::chrono::steady_clock::now();
    timeline.begin(OpClass::kOptimizer);
    spin(2);
    timeline.begin(OpClass::kCommunication);
    spin(5);
    timeline.end();
    spin(2);
    timeline.end();
    const double outer_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - outer_start).count();
    const StepTimes t = timeline.end_step();
    const double optimizer = t.ms[size_t(OpClass::kOptimizer)], wait = t.ms[size_t(OpClass::kCommunication)];
    EXPECT_EQ(t.calls[size_t(OpClass::kOptimizer)], 1);
    EXPECT_EQ(t.calls[size_t(OpClass::kCommunication)], 1);
    EXPECT_GE(wait, 5.0);
    EXPECT_GE(optimizer, 4.0);
    EXPECT_LE(optimizer + wait, outer_ms) << "the nested wait is not the optimizer's";
    EXPECT_LE(outer_ms, t.wall_ms);
  }
}

// StepProfiler as the trainer drives it: the first step warms up, the next N are profiled, then
// one `profile` line with every class.
TEST(StepProfiler, ProfilesTheStepsAfterTheFirstAndWritesOneLine) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout = make_model_layout(tiny_gpt2());
  SelfComm comm;
  auto data_comm = make_data_comm(*backend, comm);
  StepProfiler profiler(*backend, *data_comm, 2);
  ZeroEngine engine(*layout, *backend, profiler.data_comm(), comm, config(false));
  engine.init_params(1);
  const auto model = make_causal_lm<float>(*layout, *backend, profiler.kernels<float>(), kBatch, kSeq, false);
  const std::string path = ::testing::TempDir() + "/profile_metrics.jsonl";
  MetricsWriter metrics(path);
  std::vector<int32_t> in(size_t(kBatch) * kSeq, 3), tg(in.size(), 4);
  const int64_t last = 5;
  for (int64_t step = 1; step <= last; ++step) {
    profiler.begin_step(step);
    model->forward(engine.params<float>(), in.data(), tg.data(), kBatch, kSeq);
    model->backward(engine.params<float>(), engine.backward_scale());
    profiler.begin_optimizer();
    engine.step();
    profiler.end_optimizer();
    model->take_loss();
    profiler.end_step();
    profiler.report_if_done(step, last, comm, metrics);
  }
  metrics.close();
  std::ifstream file(path);
  std::string line, profile_line;
  int profile_lines = 0;
  while (std::getline(file, line)) {
    if (line.find("\"event\":\"profile\"") == std::string::npos) continue;
    ++profile_lines;
    profile_line = line;
  }
  ASSERT_EQ(profile_lines, 1);
  const boost::json::object p = boost::json::parse(profile_line).as_object();
  EXPECT_EQ(p.at("first_step").to_number<int64_t>(), 2);
  EXPECT_EQ(p.at("last_step").to_number<int64_t>(), 3);
  EXPECT_EQ(p.at("steps").to_number<int64_t>(), 2);
  const boost::json::object& classes = p.at("classes").as_object();
  double percent = 0;
  for (const char* name : {"gemm", "attention", "norm", "classifier", "elementwise", "optimizer", "communication",
                           "host_gaps"}) {
    ASSERT_TRUE(classes.contains(name)) << name;
    percent += classes.at(name).at("percent").to_number<double>();
  }
  EXPECT_NEAR(percent, 100.0, 1e-6) << "rank 0's classes add up to its step";
  EXPECT_GT(classes.at("gemm").at("calls").to_number<int64_t>(), 0);
  std::remove(path.c_str());
}

// A table whose settings and properties differ from KernelOps' defaults (as the CUDA tables'
// do), and whose ops must not run: the decorator hands every setting to it and reports its
// properties, never the defaults.
class NonDefaultSettings final : public KernelOps<float> {
 public:
  DType set_matmul_dtype(DType) override { return DType::kBF16; }
  bool set_allow_tf32(bool allow) override { return tf32 = allow, true; }
  bool set_batch_invariant(bool on) override { return invariant = on, true; }
  bool attention_saves_lse() const override { return true; }
  bool tf32 = false, invariant = false;

#define ZT_NOT_CALLED(name, ...) \
  void name(__VA_ARGS__) override { ADD_FAILURE() << #name " ran"; }
  ZT_NOT_CALLED(embedding_forward, float*, const int32_t*, const float*, const float*, int, int, int)
  ZT_NOT_CALLED(embedding_backward, float*, float*, const float*, const int32_t*, int, int, int)
  ZT_NOT_CALLED(layernorm_forward, float*, float*, float*, const float*, const float*, const float*, int, int, double)
  ZT_NOT_CALLED(layernorm_backward, float*, float*, float*, const float*, const float*, const float*, const float*,
                const float*, int, int)
  ZT_NOT_CALLED(matmul_forward, float*, const float*, const float*, const float*, int, int, int)
  ZT_NOT_CALLED(matmul_backward, float*, float*, float*, const float*, const float*, const float*, int, int, int)
  ZT_NOT_CALLED(attention_forward, float*, float*, const float*, int, int, int, int)
  ZT_NOT_CALLED(attention_backward, float*, const float*, const float*, const float*, const float*, int, int, int, int)
  ZT_NOT_CALLED(gelu_forward, float*, const float*, size_t)
  ZT_NOT_CALLED(gelu_backward, float*, const float*, const float*, size_t)
  ZT_NOT_CALLED(residual_forward, float*, const float*, const float*, size_t)
  ZT_NOT_CALLED(accumulate, float*, const float*, size_t)
  ZT_NOT_CALLED(softmax_xent_forward, float*, float*, const int32_t*, int, int, double*, double)
  ZT_NOT_CALLED(softmax_xent_backward, float*, const int32_t*, int, int, double)
  ZT_NOT_CALLED(linear_forward, float*, const float*, const float*, const float*, int, int, int)
  ZT_NOT_CALLED(linear_backward, float*, float*, float*, const float*, const float*, const float*, int, int, int, bool)
  ZT_NOT_CALLED(rmsnorm_forward, float*, float*, const float*, const float*, int, int, double)
  ZT_NOT_CALLED(rmsnorm_backward, float*, float*, const float*, const float*, const float*, const float*, int, int)
  ZT_NOT_CALLED(rotary, float*, const float*, const float*, int, int, int, int, bool)
  ZT_NOT_CALLED(gqa_attention_forward, float*, float*, const float*, const float*, const float*, int, int, int, int,
                int, int)
  ZT_NOT_CALLED(gqa_attention_backward, float*, float*, float*, const float*, const float*, const float*,
                const float*, const float*, const float*, int, int, int, int, int)
  ZT_NOT_CALLED(swiglu_forward, float*, const float*, const float*, size_t)
  ZT_NOT_CALLED(swiglu_backward, float*, float*, const float*, const float*, const float*, size_t)
#undef ZT_NOT_CALLED
};

TEST(ProfiledKernels, ForwardsSettingsAndProperties) {
  auto backend = make_cpu_backend();
  OpTimeline timeline(*backend);
  NonDefaultSettings inner;
  const std::unique_ptr<KernelOps<float>> profiled = make_profiled_kernels<float>(inner, timeline);
  EXPECT_EQ(profiled->set_matmul_dtype(DType::kF32), DType::kBF16);
  EXPECT_TRUE(profiled->set_allow_tf32(true));
  EXPECT_TRUE(inner.tf32);
  EXPECT_TRUE(profiled->set_batch_invariant(true));
  EXPECT_TRUE(inner.invariant);
  EXPECT_TRUE(profiled->attention_saves_lse());
}

}  // namespace
}  // namespace zt
