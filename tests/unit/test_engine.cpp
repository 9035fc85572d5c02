// The ZeRO engine on one rank: model-state bytes per docs/design.md's table, the fp16 overflow path,
// gradient accumulation and mixed-precision training agreeing with fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "comm/data_comm.h"
#include "core/error.h"
#include "comm/self_comm.h"
#include "model/causal_lm.h"
#include "model/model_memory.h"
#include "tiny_models.h"
#include "zero/engine.h"
#include "zero/memory_estimate.h"

namespace zt {
namespace {


DsConfig config_for(DType dtype, int64_t accumulation = 1) {
  DsConfig c;
  c.train_micro_batch_size_per_gpu = 2;
  c.gradient_accumulation_steps = accumulation;
  c.train_batch_size = 2 * accumulation;
  c.optimizer.lr = 1e-2;
  c.gradient_clipping = 1.0;
  c.bf16 = dtype == DType::kBF16;
  c.fp16.enabled = dtype == DType::kF16;
  c.fp16.initial_scale_power = 8;
  return c;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<StepOutcome> outcomes;
};

TrainRun train(DType dtype, int steps, int64_t accumulation = 1, int micro = 2) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(testing::tiny_gpt2());
  const ModelLayout& layout = *layout_ptr;
  DsConfig cfg = config_for(dtype, accumulation);
  cfg.train_micro_batch_size_per_gpu = micro;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg);
  engine.init_params(1);
  const int T = 16, total = 2 * 2;  // a global batch of 4 sequences however it is split
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), micro, T, false);
  CausalLM<float>& model = *model_ptr;
  TrainRun run;
  std::vector<int32_t> in(size_t(total) * T), tg(size_t(total) * T);
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < total * T; ++i) {
      in[i] = (i * 7 + step) % 64;
      tg[i] = (i * 7 + step + 1) % 64;  // a learnable rule: next = current + 1
    }
    for (int m = 0; m < accumulation; ++m) {
      model.forward(engine, in.data() + m * micro * T, tg.data() + m * micro * T, micro, T);
      model.backward(engine, engine.backward_scale());
    }
    run.losses.push_back(model.take_loss() / double(accumulation));
    run.outcomes.push_back(engine.step());
  }
  return run;
}

TEST(Engine, ModelStateBytesFollowTheStage0Table) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(testing::tiny_gpt2());
  const ModelLayout& layout = *layout_ptr;
  const double psi = double(layout.num_params());
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SelfComm comm;
    auto engine_comm = make_data_comm(*backend, comm);
    ZeroEngine engine(layout, *backend, *engine_comm, comm, config_for(dtype));
    ModelStateBytes b = engine.model_state_bytes();
    // Stage 0: 2 psi + 2 psi + 12 psi, within the padding (every tensor is 64-byte aligned); bf16
    // accumulates its gradients in fp32 there (DeepSpeed's BF16_Optimizer): 4 psi.
    const double grads = dtype == DType::kBF16 ? 4 * psi : 2 * psi;
    EXPECT_NEAR(double(b.params), 2 * psi, 0.02 * 2 * psi);
    EXPECT_NEAR(double(b.grads), grads, 0.02 * grads);
    EXPECT_NEAR(double(b.master + b.exp_avg + b.exp_avg_sq), 12 * psi, 0.02 * 12 * psi);
    EXPECT_NEAR(double(b.total()), 14 * psi + grads, 0.02 * (14 * psi + grads));
  }
  SelfComm comm;
  auto fp32_comm = make_data_comm(*backend, comm);
  ZeroEngine fp32(layout, *backend, *fp32_comm, comm, config_for(DType::kF32));
  EXPECT_EQ(fp32.model_state_bytes().master, 0u);  // the fp32 parameters are the master weights
  EXPECT_EQ(fp32.buffer_bytes().working, 0u);  // fp32 stage 0 computes on the flat buffers directly
}

// zero_estimate adds up the components' size functions; the engine allocates through the same
// components. Each kind of state and buffer must agree, byte for byte, over stages, dtypes and
// offload settings (gathered units excepted: the estimate is their worst case, an engine that has
// not run holds none).
TEST(Engine, AllocatesWhatZeroEstimateSays) {
  auto backend = make_cpu_backend();
  const ModelConfig model = testing::tiny_gpt2();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(model);
  const ModelLayout& layout = *layout_ptr;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  struct Offload {
    const char* name;
    double ratio;  // 0: none
    bool params;   // offload_param cpu (stage 3)
    bool delayed = false;  // --delayed_param_update: the pending parameters' host copy
  };
  const Offload offloads[] = {{"none", 0, false}, {"optimizer", 1, false}, {"half the optimizer", 0.5, false},
                              {"optimizer and params", 1, true}, {"half the optimizer, delayed", 0.5, false, true}};
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (DType activations : {DType::kF32, DType::kBF16}) {
        for (const Offload& off : offloads) {
          if ((off.ratio > 0 && stage == 0) || (off.params && stage != 3)) continue;
          DsConfig cfg = config_for(dtype);
          cfg.zero.stage = stage;
          cfg.communication_data_type = DType::kF32;  // a cast into the buckets at every stage
          if (off.ratio > 0) {
            cfg.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;
            cfg.zero.offload_optimizer.ratio = off.ratio;
          }
          if (off.params) cfg.zero.offload_param.device = OffloadConfig::Device::kCpu;
          if (off.delayed) cfg.zero.delayed_param_update_after = 0;
          const std::string where = cat("stage ", stage, " ", dtype_name(dtype), ", activations ",
                                        dtype_name(activations), ", offload ", off.name);
          RunShape run;
          run.activation_dtype = dtype_name(activations);
          const MemoryEstimate e = estimate_memory(model, cfg, run);
          ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg, activations);
          const ModelStateBytes dev = engine.model_state_bytes(), moved = engine.offloaded_state_bytes();
          const BufferBytes buf = engine.buffer_bytes();
          const auto same = [&](const ModelStateBytes& a, const ModelStateBytes& b, const char* kind) {
            EXPECT_EQ(a.params, b.params) << where << ": " << kind << " params";
            EXPECT_EQ(a.grads, b.grads) << where << ": " << kind << " grads";
            EXPECT_EQ(a.master, b.master) << where << ": " << kind << " master";
            EXPECT_EQ(a.exp_avg, b.exp_avg) << where << ": " << kind << " exp_avg";
            EXPECT_EQ(a.exp_avg_sq, b.exp_avg_sq) << where << ": " << kind << " exp_avg_sq";
          };
          same(dev, e.device_states, "device");
          same(moved, e.offloaded_states, "offloaded");
          EXPECT_EQ(buf.buckets, e.buckets) << where;
          EXPECT_EQ(buf.working, e.working) << where;
          EXPECT_EQ(buf.offload, e.offload_buffers) << where;
          EXPECT_GT(dev.total() + moved.total(), 0u) << where;
          // The GPU view rounds the device pool's allocations one by one: listed, they add up to
          // the pool (stage 3's gathered units: the largest that fit under the bound, no more).
          size_t listed = 0;
          for (size_t bytes : e.device_allocations) listed += bytes;
          if (stage < 3) {
            EXPECT_EQ(listed, e.device_total()) << where;
          } else {
            EXPECT_LE(listed, e.device_total()) << where;
            EXPECT_GE(listed + e.gather, e.device_total()) << where;
          }
        }
      }
    }
  }
  // Muon: exp_avg_sq for the AdamW-stepped tensors alone, and its buffers (the updates, the
  // exchange, Newton-Schulz's workspace), at every stage; offload is refused.
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      DsConfig cfg = config_for(dtype);
      cfg.zero.stage = stage;
      cfg.optimizer.type = OptimizerConfig::Type::kMuon;
      const std::string where = cat("Muon, stage ", stage, " ", dtype_name(dtype));
      const MemoryEstimate e = estimate_memory(model, cfg, RunShape{});
      ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg);
      const ModelStateBytes dev = engine.model_state_bytes();
      EXPECT_EQ(dev.master, e.device_states.master) << where;
      EXPECT_EQ(dev.exp_avg, e.device_states.exp_avg) << where;
      EXPECT_EQ(dev.exp_avg_sq, e.device_states.exp_avg_sq) << where;
      EXPECT_EQ(engine.buffer_bytes().optimizer, e.optimizer) << where;
      EXPECT_GT(e.optimizer, 0u) << where;
      size_t aux = 0;  // the elements of tensors that are not hidden matrices
      for (size_t t = 0; t < layout.tensor_shapes().size(); ++t) {
        if (!layout.tensor_shapes()[t].hidden_matrix) aux += layout.tensor_ranges()[t].second - layout.tensor_ranges()[t].first;
      }
      EXPECT_EQ(dev.exp_avg_sq, aux * sizeof(float)) << where;
      EXPECT_LT(dev.exp_avg_sq, dev.exp_avg) << where;
      size_t listed = 0;  // the GPU view's list of device arrays adds up to the device pool
      for (size_t bytes : e.device_allocations) listed += bytes;
      if (stage < 3) EXPECT_EQ(listed, e.device_total()) << where;
      if (stage == 0) continue;
      // Offloaded, wholly and in part: the offloaded part keeps both moments (the swap records'
      // layout), and its updates cross to the device in a host buffer of their own.
      for (double ratio : {1.0, 0.5}) {
        cfg.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;
        cfg.zero.offload_optimizer.ratio = ratio;
        const MemoryEstimate eo = estimate_memory(model, cfg, RunShape{});
        ZeroEngine offloaded(layout, *backend, *engine_comm, comm, cfg);
        const ModelStateBytes d = offloaded.model_state_bytes(), o = offloaded.offloaded_state_bytes();
        EXPECT_EQ(d.exp_avg_sq, eo.device_states.exp_avg_sq) << where << " ratio " << ratio;
        EXPECT_EQ(o.exp_avg_sq, eo.offloaded_states.exp_avg_sq) << where << " ratio " << ratio;
        EXPECT_EQ(o.master, eo.offloaded_states.master) << where << " ratio " << ratio;
        EXPECT_EQ(offloaded.buffer_bytes().offload, eo.offload_buffers) << where << " ratio " << ratio;
        EXPECT_EQ(offloaded.buffer_bytes().optimizer, eo.optimizer) << where << " ratio " << ratio;
      }
    }
  }
  // Adafactor: exp_avg_sq for the 1-D tensors alone plus every matrix's row and column factors,
  // exp_avg only with beta1, its sums and scaled rows as buffers; offloaded, wholly and in part.
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool beta1 : {false, true}) {
      DsConfig cfg = config_for(stage % 2 ? DType::kBF16 : DType::kF32);
      cfg.zero.stage = stage;
      cfg.optimizer.type = OptimizerConfig::Type::kAdafactor;
      if (beta1) cfg.optimizer.adafactor_beta1 = 0.9;
      const std::string where = cat("Adafactor, stage ", stage, beta1 ? " with beta1" : "");
      for (double ratio : {0.0, 1.0, 0.5}) {
        if (ratio > 0 && stage == 0) continue;
        cfg.zero.offload_optimizer.device = ratio > 0 ? OffloadConfig::Device::kCpu : OffloadConfig::Device::kNone;
        cfg.zero.offload_optimizer.ratio = ratio > 0 ? ratio : 1.0;
        const MemoryEstimate e = estimate_memory(model, cfg, RunShape{});
        ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg);
        const ModelStateBytes d = engine.model_state_bytes(), o = engine.offloaded_state_bytes();
        EXPECT_EQ(d.exp_avg, e.device_states.exp_avg) << where << " ratio " << ratio;
        EXPECT_EQ(d.exp_avg_sq, e.device_states.exp_avg_sq) << where << " ratio " << ratio;
        EXPECT_EQ(o.exp_avg, e.offloaded_states.exp_avg) << where << " ratio " << ratio;
        EXPECT_EQ(o.exp_avg_sq, e.offloaded_states.exp_avg_sq) << where << " ratio " << ratio;
        EXPECT_EQ(engine.buffer_bytes().optimizer, e.optimizer) << where << " ratio " << ratio;
        EXPECT_EQ(engine.buffer_bytes().offload, e.offload_buffers) << where << " ratio " << ratio;
        EXPECT_EQ(d.exp_avg == 0 && o.exp_avg == 0, !beta1) << where;
        if (ratio > 0) continue;
        size_t sq = 0;  // the 1-D tensors' elements and the matrices' rows and columns
        for (size_t t = 0; t < layout.tensor_shapes().size(); ++t) {
          const TensorShape& shape = layout.tensor_shapes()[t];
          sq += shape.matrix() ? shape.rows + shape.cols : layout.tensor_ranges()[t].second - layout.tensor_ranges()[t].first;
        }
        if (stage == 0) {
          EXPECT_EQ(d.exp_avg_sq, sq * sizeof(float)) << where;
        }
        EXPECT_LT(10 * d.exp_avg_sq, d.master + d.params) << where;
      }
    }
  }
  // The activations the estimate lists are the arrays the model allocates, in either dtype.
  for (bool checkpointing : {false, true}) {
    const auto f = make_causal_lm<float>(layout, *backend, backend->ops(), 3, 16, checkpointing);
    const auto b = make_causal_lm<bf16>(layout, *backend, backend->ops_bf16(), 3, 16, checkpointing);
    EXPECT_EQ(activation_allocations(model, 3, 16, checkpointing).size(), 13u);  // Gpt2ActivationArrays::arrays()
    EXPECT_EQ(f->activation_bytes(), activation_bytes(model, 3, 16, checkpointing)) << checkpointing;
    // The CPU's bf16 attention saves each row's logsumexp (bf16_kernels.cpp).
    EXPECT_TRUE(backend->ops_bf16().attention_saves_lse());
    EXPECT_EQ(b->activation_bytes(), activation_bytes(model, 3, 16, checkpointing, DType::kBF16, true))
        << checkpointing;
    EXPECT_LT(b->activation_bytes(), f->activation_bytes()) << checkpointing;
  }
  // A chunked classifier (--classifier_chunk_tokens 7): the estimate counts one chunk's logits, as
  // the model allocates them, in either dtype (with the CPU bf16 arena sized for a chunk).
  for (DType activations : {DType::kF32, DType::kBF16}) {
    RunShape run;
    run.micro_batch = run.eval_batch = 3;
    run.seq_len = 16;
    run.activation_dtype = dtype_name(activations);
    run.classifier_chunk = 7;
    const MemoryEstimate chunked = estimate_memory(model, config_for(DType::kF32), run);
    run.classifier_chunk = 0;
    const MemoryEstimate whole = estimate_memory(model, config_for(DType::kF32), run);
    const size_t elem = dtype_size(activations);
    if (activations == DType::kF32) {
      const auto m = make_causal_lm<float>(layout, *backend, backend->ops(), 3, 16, false, 7);
      EXPECT_EQ(chunked.activations, m->activation_bytes());
      EXPECT_EQ(whole.activations - chunked.activations, size_t(48 - 7) * model.vocab_size * elem);
    } else {
      const auto m = make_causal_lm<bf16>(layout, *backend, backend->ops_bf16(), 3, 16, false, 7);
      EXPECT_EQ(chunked.activations,
                m->activation_bytes() + cpu_bf16_scratch_bytes(model, 3, 16, size_t(m->logits_rows())));
      EXPECT_GE(whole.activations - chunked.activations, size_t(48 - 7) * model.vocab_size * elem);
    }
  }
  // The flash attention's saved state (the logsumexp of each row) is T times smaller.
  const size_t probabilities = size_t(model.n_layer) * 3 * model.n_head * 16 * 16 * sizeof(float);
  EXPECT_EQ(activation_bytes(model, 3, 16, false, DType::kBF16, false) -
                activation_bytes(model, 3, 16, false, DType::kBF16, true),
            probabilities - probabilities / 16);
}

// Adam's first moment after one step of a global batch of 4 sequences split into `accumulation`
// micro-steps: 0.1 x the (clipped) gradient, element by element. Stage 0, bf16, with
// data_types.grad_accum_dtype `grad_accum` (null: DeepSpeed's default).
std::vector<float> first_moment(int64_t accumulation, std::optional<DType> grad_accum) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(testing::tiny_gpt2());
  const ModelLayout& layout = *layout_ptr;
  const int micro = int(4 / accumulation), T = 16;
  DsConfig cfg = config_for(DType::kBF16, accumulation);
  cfg.train_micro_batch_size_per_gpu = micro;
  cfg.grad_accum_dtype = grad_accum;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg);
  engine.init_params(1);
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), micro, T, false);
  std::vector<int32_t> in(size_t(4) * T), tg(size_t(4) * T);
  for (int i = 0; i < 4 * T; ++i) {
    in[i] = (i * 7) % 64;
    tg[i] = (i * 7 + 1) % 64;
  }
  for (int m = 0; m < accumulation; ++m) {
    model_ptr->forward(engine, in.data() + m * micro * T, tg.data() + m * micro * T, micro, T);
    model_ptr->backward(engine, engine.backward_scale());
  }
  engine.step();
  std::vector<float> m(layout.flat_size());
  engine.read_field(StateField::kExpAvg, 0, m.size(), m.data());
  return m;
}

// The largest difference between two gradients, relative to the largest element of the first.
double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(a[i])));
  }
  return diff / scale;
}

// bf16 at stage 0 accumulates gradients in fp32 (DeepSpeed's BF16_Optimizer, its default there):
// four micro-steps give the gradient of the whole batch to fp32's precision. Accumulating in
// bf16 (grad_accum_dtype "bf16") rounds every micro-step's sum to 8 bits, which this test sees.
TEST(Engine, Bf16Stage0AccumulatesGradientsInFp32) {
  const double fp32_accum = max_relative_difference(first_moment(1, std::nullopt), first_moment(4, std::nullopt));
  const double bf16_accum = max_relative_difference(first_moment(1, DType::kBF16), first_moment(4, DType::kBF16));
  EXPECT_LT(fp32_accum, 1e-4);
  EXPECT_GT(bf16_accum, 1e-3);  // the control: the comparison can tell the two apart
}

TEST(Engine, GradientAccumulationMatchesOneBigBatch) {
  TrainRun whole = train(DType::kF32, 4, 1, 4);
  TrainRun split = train(DType::kF32, 4, 4, 1);
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    EXPECT_NEAR(split.losses[i], whole.losses[i], 1e-5 * whole.losses[i]) << "step " << i;
  }
}

TEST(Engine, MixedPrecisionTracksFp32) {
  TrainRun fp32 = train(DType::kF32, 20);
  TrainRun bf16 = train(DType::kBF16, 20);
  TrainRun fp16 = train(DType::kF16, 20);
  EXPECT_LT(fp32.losses.back(), fp32.losses.front() - 0.5);  // it learns
  EXPECT_LT(bf16.losses.back(), bf16.losses.front() - 0.5);
  const bool bf16_matmuls = make_cpu_backend()->ops().set_matmul_dtype(DType::kBF16) == DType::kBF16;
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    if (bf16_matmuls) {
      // bf16 GEMMs (a CPU with bf16 instructions) round every activation and gradient they read
      // as well: the first loss agrees to bf16's precision, and at this learning rate (1e-2 on a
      // 2-layer model) the trajectories then drift by up to ~15%, still learning as fast.
      EXPECT_NEAR(bf16.losses[i], fp32.losses[i], (i == 0 ? 0.01 : 0.2) * fp32.losses[i]) << "bf16 step " << i;
    } else {
      // 16-bit weights round at every step; the trajectories drift apart by about 1%.
      EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 0.025 * fp32.losses[i]) << "bf16 step " << i;
    }
    if (!fp16.outcomes[i].skipped) {
      EXPECT_NEAR(fp16.losses[i], fp32.losses[i], 0.01 * fp32.losses[i]) << "fp16 step " << i;
    }
  }
  EXPECT_EQ(fp16.outcomes[0].loss_scale, 256.0);
}

TEST(Engine, Fp16OverflowSkipsTheStepAndLowersTheScale) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(testing::tiny_gpt2());
  const ModelLayout& layout = *layout_ptr;
  DsConfig cfg = config_for(DType::kF16);
  cfg.fp16.initial_scale_power = 40;  // 2^40 x gradients overflow fp16 for sure
  cfg.fp16.hysteresis = 1;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, cfg);
  engine.init_params(1);
  const int T = 16;
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), 2, T, false);
  CausalLM<float>& model = *model_ptr;
  std::vector<int32_t> in(2 * T, 3), tg(2 * T, 4);
  const std::vector<float> before = engine.gather_master_weights();
  model.forward(engine, in.data(), tg.data(), 2, T);
  model.backward(engine, engine.backward_scale());
  StepOutcome o = engine.step();
  EXPECT_TRUE(o.skipped);
  EXPECT_EQ(o.loss_scale, std::ldexp(1.0, 40));
  EXPECT_EQ(engine.backward_scale(), std::ldexp(1.0, 39));
  EXPECT_EQ(before, engine.gather_master_weights()) << "a skipped step must not touch the weights";
}

}  // namespace
}  // namespace zt
