// zero_estimate's pieces: DeepSpeed's model-state formulas over a grid, size parsing, this
// engine's model-state bytes against docs/design.md's table, the recommender's choices, and the
// GPU view (the CUDA caching allocator's rounding, worked out by hand from its rules, and the
// fixed costs).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cuda/caching_allocator_rules.h"
#include "config/sizes.h"
#include "core/error.h"
#include "model/model_layout.h"
#include "zero/comm_estimate.h"
#include "zero/memory_estimate.h"
#include "zero/recommender.h"
#include "zero/zero_plan.h"

namespace zt {
namespace {

// DeepSpeed's documented per-GPU/per-CPU bytes (docs: "Memory Requirements"), written out here
// term by term: 16-bit params 2, gradients 2, fp32 master 4, momentum 4, variance 4 bytes.
TEST(DeepSpeedFormulas, MatchTheDocumentedBytesOverAGrid) {
  for (double N : {1e6, 2783958016.0, 7e9, 175e9}) {
    for (double L : {1e5, 65798144.0, 1e9}) {
      for (int G : {1, 2, 8}) {
        for (int K : {1, 4}) {
          const double gpus = double(G) * K;
          const auto z2 = deepspeed_zero2_rows(N, G, K, 1.5);
          ASSERT_EQ(z2.size(), 2u);
          EXPECT_EQ(z2[0].gpu_bytes, int64_t(2 * N));                              // params only
          EXPECT_EQ(z2[0].cpu_bytes, int64_t(N * std::max(4 * gpus, 16.0) * 1.5));  // fp32 states on CPU
          EXPECT_EQ(z2[1].gpu_bytes, int64_t(2 * N + std::floor(18 * N / gpus)));
          EXPECT_EQ(z2[1].cpu_bytes, int64_t(N * 4 * G * 1.5));
          const auto z3 = deepspeed_zero3_rows(N, L, G, K, 1.5);
          ASSERT_EQ(z3.size(), 6u);
          const double per_node = 1.0 / K;
          EXPECT_EQ(z3[0].gpu_bytes, int64_t(4 * L));
          EXPECT_EQ(z3[0].cpu_bytes, int64_t(N * 18 * per_node * 1.5));
          EXPECT_EQ(z3[1].cpu_bytes, int64_t(N * std::max(4.0 * G, 18 * per_node) * 1.5));
          EXPECT_EQ(z3[2].gpu_bytes, int64_t(4 * L + std::floor(2 * N / gpus)));
          EXPECT_EQ(z3[2].cpu_bytes, int64_t(N * 16 * per_node * 1.5));
          EXPECT_EQ(z3[3].cpu_bytes, int64_t(N * std::max(4.0 * G, 16 * per_node) * 1.5));
          EXPECT_EQ(z3[4].gpu_bytes, int64_t(4 * L + std::floor(18 * N / gpus)));
          EXPECT_EQ(z3[4].cpu_bytes, int64_t(L * 4 * G * 1.5));
          EXPECT_EQ(z3[5].cpu_bytes, int64_t(N * 4 * G * 1.5));
          EXPECT_TRUE(z3[0].offload_param && z3[0].offload_optimizer && z3[0].zero_init);
          EXPECT_TRUE(!z3[5].offload_param && !z3[5].offload_optimizer && !z3[5].zero_init);
        }
      }
    }
  }
}

// HF's DeepSpeed guide prints this for bigscience/T0_3B (2783958016 parameters, a 32128 x 2048
// shared embedding) on one node with two GPUs.
TEST(DeepSpeedFormulas, PrintsHfGuidesTable) {
  const std::string expected =
      "Estimated memory needed for params, optim states and gradients for a:\n"
      "HW: Setup with 1 node, 2 GPUs per node.\n"
      "SW: Model with 2783M total params, 65M largest layer params.\n"
      "  per CPU  |  per GPU |   Options\n"
      "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n"
      "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0\n"
      "   62.23GB |   2.84GB | offload_param=none, offload_optimizer=cpu , zero_init=1\n"
      "   62.23GB |   2.84GB | offload_param=none, offload_optimizer=cpu , zero_init=0\n"
      "    0.74GB |  23.58GB | offload_param=none, offload_optimizer=none, zero_init=1\n"
      "   31.11GB |  23.58GB | offload_param=none, offload_optimizer=none, zero_init=0\n";
  EXPECT_EQ(deepspeed_table(3, 2783958016.0, 65798144.0, 2, 1, 1.5), expected);
}

TEST(Sizes, SuffixesAndErrors) {
  EXPECT_EQ(parse_size("2783M", SizeKind::kCount, "--params"), 2783000000u);
  EXPECT_EQ(parse_size("1.5B", SizeKind::kCount, "--params"), 1500000000u);
  EXPECT_EQ(parse_size("7e9", SizeKind::kCount, "--params"), 7000000000u);
  EXPECT_EQ(parse_size("80GB", SizeKind::kBytesMemory, "--gpu_memory"), 80ull << 30);
  EXPECT_EQ(parse_size("2TB", SizeKind::kBytesMemory, "--nvme_capacity"), 2ull << 40);
  EXPECT_EQ(parse_size("5GB", SizeKind::kBytesSI, "--max_shard_size"), 5000000000u);
  EXPECT_EQ(parse_size("2GiB", SizeKind::kBytesSI, "--max_shard_size"), 2ull << 30);
  auto error = [](const std::string& text, SizeKind kind) {
    try {
      parse_size(text, kind, "--x");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error("-5M", SizeKind::kCount), "--x: must be positive, got '-5M'");
  EXPECT_EQ(error("0", SizeKind::kCount), "--x: must be positive, got '0'");
  EXPECT_NE(error("7X", SizeKind::kCount).find("unknown suffix 'X'"), std::string::npos);
  EXPECT_NE(error("80GiG", SizeKind::kBytesMemory).find("unknown suffix 'GiG'"), std::string::npos);
  EXPECT_EQ(error("lots", SizeKind::kCount), "--x: not a number: 'lots'");
}

// The shipped GPT-2 124M config (12 layers, 768 wide, vocab 50257).
ModelConfig gpt2_small() { return load_model_config(ZT_SOURCE_DIR "/configs/models/gpt2-124M.json"); }

TEST(EngineEstimate, ModelStatesFollowDesignTable) {
  const ModelConfig m = gpt2_small();
  EXPECT_EQ(largest_layer_params(m), 50257 * 768);  // the token embedding
  const size_t flat = make_model_layout(m)->flat_size();
  for (int world : {1, 8}) {
    const double P = double((flat + 16 * world - 1) / (16 * world) * (16 * world)), p = P / world;
    // Stage 0's bf16 gradients accumulate in fp32 (DeepSpeed's BF16_Optimizer): 4 bytes each.
    const double expected[4] = {2 * P + 4 * P + 12 * P, 2 * P + 2 * P + 12 * p, 2 * P + 2 * p + 12 * p, 16 * p};
    for (int stage = 0; stage <= 3; ++stage) {
      DsConfig c;
      c.bf16 = true;
      c.zero.stage = stage;
      RunShape run;
      run.world_size = world;
      const MemoryEstimate e = estimate_memory(m, c, run);
      EXPECT_EQ(double(e.device_states.total()), expected[stage]) << "stage " << stage << " world " << world;
      EXPECT_EQ(e.offloaded_states.total(), 0u);
    }
    // Stage 2 with the optimizer on the CPU: 2 P + 2 p on the device; 12 p (+ the 2 p gradient
    // copy) in pinned memory.
    DsConfig c;
    c.bf16 = true;
    c.zero.stage = 2;
    c.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;
    c.zero.offload_optimizer.pin_memory = true;
    RunShape run;
    run.world_size = world;
    const MemoryEstimate e = estimate_memory(m, c, run);
    EXPECT_EQ(double(e.device_states.total()), 2 * P + 2 * p);
    EXPECT_EQ(double(e.offloaded_states.total()), 14 * p);
    EXPECT_GE(double(e.by_pool[int(Pool::kPinned)]), 14 * p);
  }
}

// The recommender's ladder for GPT-2 small, bf16, micro-batch 1 x 128 tokens on 8 ranks, with
// 1 TiB of host memory.
struct LadderCase {
  ModelConfig model;
  DsConfig base;
  RunShape run;
  Hardware hw;
};
LadderCase ladder_case() {
  LadderCase c;
  c.model = gpt2_small();
  c.base.bf16 = true;
  c.base.train_micro_batch_size_per_gpu = 1;
  c.run.world_size = c.run.ranks_per_node = 8;
  c.run.micro_batch = c.run.eval_batch = 1;
  c.run.seq_len = 128;
  c.run.activation_dtype = "fp32";  // auto would be bf16 on a CPU with bf16 GEMMs: the same on every CPU
  c.hw.cpu_memory = 1ull << 40;
  return c;
}

TEST(Recommender, WalksTheLadderToTheFirstThatFits) {
  const auto [m, base, run, start] = ladder_case();
  Hardware hw = start;
  // Plenty of GPU memory: stage 0, the fastest.
  hw.gpu_memory = 80ull << 30;
  Recommendation r = recommend(m, base, run, hw);
  ASSERT_EQ(r.chosen, 0);
  EXPECT_EQ(r.rungs[0].name, "stage 0");
  // Less: every rung before the chosen one overflows the GPU, the chosen one fits.
  for (uint64_t gpu : {2000ull << 20, 1100ull << 20, 900ull << 20, 800ull << 20}) {
    hw.gpu_memory = gpu;
    r = recommend(m, base, run, hw);
    ASSERT_GE(r.chosen, 0) << gpu;
    for (int i = 0; i < r.chosen; ++i) {
      EXPECT_FALSE(r.rungs[size_t(i)].fits);
      EXPECT_GT(r.rungs[size_t(i)].estimate.device_total(), gpu);
    }
    EXPECT_LE(r.rungs[size_t(r.chosen)].estimate.device_total(), gpu);
  }
  // A base config with fp32 gradient accumulation (valid at stage 0 only) walks the same ladder:
  // each rung takes DeepSpeed's default for its stage, as the printed config (no data_types) will.
  DsConfig fp32_grads = base;
  fp32_grads.grad_accum_dtype = DType::kF32;
  const Recommendation same = recommend(m, fp32_grads, run, hw);
  EXPECT_EQ(same.chosen, r.chosen);
  ASSERT_GE(same.chosen, 2);
  EXPECT_EQ(same.rungs[size_t(same.chosen)].estimate.device_total(), r.rungs[size_t(r.chosen)].estimate.device_total());
  // A GPU too small for anything on the device: offload; with too little host memory for that
  // and no NVMe, nothing fits; with NVMe, the NVMe rungs.
  hw.gpu_memory = 900ull << 20;
  hw.cpu_memory = 1ull << 30;
  r = recommend(m, base, run, hw);
  EXPECT_EQ(r.chosen, -1);
  for (const RungVerdict& v : r.rungs) EXPECT_EQ(v.name.find("NVMe"), std::string::npos) << v.name;
  hw.nvme_capacity = 1ull << 40;
  r = recommend(m, base, run, hw);
  ASSERT_GE(r.chosen, 0);
  EXPECT_NE(r.rungs[size_t(r.chosen)].name.find("NVMe"), std::string::npos);
  EXPECT_EQ(r.rungs[size_t(r.chosen)].config.zero.offload_optimizer.device, OffloadConfig::Device::kNvme);
  EXPECT_LE(r.rungs[size_t(r.chosen)].estimate.host_total() * 8, hw.cpu_memory);
  // The ready config is one the trainer accepts, and says what was estimated.
  const DsConfig& chosen = r.rungs[size_t(r.chosen)].config;
  AutoValues autos;
  autos.world_size = 8;
  autos.hidden_size = 768;
  const DsConfig back = parse_ds_config(boost::json::value(ds_config_json(chosen)), "recommended.json", autos);
  EXPECT_EQ(back.zero.stage, chosen.zero.stage);
  EXPECT_EQ(back.zero.offload_optimizer.device, chosen.zero.offload_optimizer.device);
  EXPECT_EQ(back.zero.offload_param.device, chosen.zero.offload_param.device);
  EXPECT_EQ(back.zero.sub_group_size, chosen.zero.sub_group_size);
  EXPECT_EQ(back.zero.stage3_max_live_parameters, chosen.zero.stage3_max_live_parameters);
  EXPECT_TRUE(back.bf16);
  // The estimate's optimizer and what makes its state and its rule, for each type.
  for (auto type : {OptimizerConfig::Type::kLion, OptimizerConfig::Type::kAdagrad, OptimizerConfig::Type::kLamb,
                    OptimizerConfig::Type::kMuon, OptimizerConfig::Type::kOneBitAdam,
                    OptimizerConfig::Type::kZeroOneAdam}) {
    DsConfig other = chosen;
    if (type == OptimizerConfig::Type::kOneBitAdam || type == OptimizerConfig::Type::kZeroOneAdam) {  // stage 0 only
      other.zero.stage = 0;
      other.zero.offload_optimizer = other.zero.offload_param = OffloadConfig{};
      other.optimizer.freeze_step = 23;
      other.optimizer.var_freeze_step = 24;
      other.optimizer.var_update_scaler = 3;
      other.optimizer.local_step_scaler = 25;
      other.optimizer.local_step_clipper = 4;
    }
    other.optimizer.type = type;
    other.optimizer.muon_lr = 0.03;
    other.optimizer.adam_lr = 2e-4;
    other.optimizer.ns_method = OptimizerConfig::NsMethod::kStandard;
    other.optimizer.eps = 1e-10;
    other.optimizer.max_coeff = 3;
    other.optimizer.lr_decay = 0.25;
    other.optimizer.bias_correction = false;
    const DsConfig again = parse_ds_config(boost::json::value(ds_config_json(other)), "recommended.json", autos);
    EXPECT_EQ(again.optimizer.type, type) << optimizer_name(type);
    if (type == OptimizerConfig::Type::kAdagrad) {
      EXPECT_DOUBLE_EQ(again.optimizer.eps, 1e-10);
      EXPECT_DOUBLE_EQ(again.optimizer.lr_decay, 0.25);
    } else if (type == OptimizerConfig::Type::kLamb) {
      EXPECT_DOUBLE_EQ(again.optimizer.max_coeff, 3);
      EXPECT_FALSE(again.optimizer.bias_correction);
    } else if (type == OptimizerConfig::Type::kMuon) {
      EXPECT_DOUBLE_EQ(again.optimizer.muon_lr, 0.03);
      EXPECT_DOUBLE_EQ(again.optimizer.adam_lr, 2e-4);
      EXPECT_DOUBLE_EQ(again.optimizer.eps, 1e-10);
      EXPECT_EQ(again.optimizer.ns_method, OptimizerConfig::NsMethod::kStandard);
    } else if (type == OptimizerConfig::Type::kOneBitAdam) {
      EXPECT_EQ(again.optimizer.freeze_step, 23);
    } else if (type == OptimizerConfig::Type::kZeroOneAdam) {
      EXPECT_EQ(again.optimizer.var_freeze_step, 24);
      EXPECT_EQ(again.optimizer.var_update_scaler, 3);
      EXPECT_EQ(again.optimizer.local_step_scaler, 25);
      EXPECT_EQ(again.optimizer.local_step_clipper, 4);
    }
  }
  // The 1-bit optimizers: the ladder is their stage 0 alone (the other rungs are configs they refuse).
  for (auto type : {OptimizerConfig::Type::kOneBitAdam, OptimizerConfig::Type::kZeroOneAdam}) {
    DsConfig onebit = base;
    onebit.optimizer.type = type;
    Hardware big = start;
    big.gpu_memory = 80ull << 30;
    const Recommendation only = recommend(m, onebit, run, big);
    ASSERT_EQ(only.rungs.size(), 1u) << optimizer_name(type);
    EXPECT_EQ(only.rungs[0].config.zero.stage, 0);
    EXPECT_EQ(only.chosen, 0);
  }
  // Adam with L2 decay stays so.
  {
    DsConfig adam = chosen;
    adam.optimizer.type = OptimizerConfig::Type::kAdam;
    adam.optimizer.adam_w_mode = false;
    const DsConfig again = parse_ds_config(boost::json::value(ds_config_json(adam)), "recommended.json", autos);
    EXPECT_FALSE(again.optimizer.adam_w_mode);
  }
}

// ---- the GPU view ----

constexpr size_t KiB = size_t(1) << 10, MiB = size_t(1) << 20;

// Segments worked out by hand from caching_allocator_rules.h: blocks are multiples of 512 B;
// blocks up to 1 MiB share 2 MiB segments; larger ones get a segment rounded up to 2 MiB, and a
// remainder of 1 MiB or more is split off for later large blocks.
TEST(GpuEstimate, CachingAllocatorSegmentsByHand) {
  // 3 MiB + 1 -> block 3 MiB + 512 -> a 4 MiB segment (the 1 MiB - 512 left stays in the block);
  // the two 700 KiB blocks share one 2 MiB small segment.
  EXPECT_EQ(cuda_reserved_bytes({3 * MiB + 1, 700 * KiB, 700 * KiB}), 6 * MiB);
  // A third 700 KiB no longer fits the 648 KiB left: a second small segment.
  EXPECT_EQ(cuda_reserved_bytes({700 * KiB, 700 * KiB, 700 * KiB}), 4 * MiB);
  // Exactly 1 MiB is small (two share a segment); 1 MiB + 1 rounds to 1 MiB + 512, a large block.
  EXPECT_EQ(cuda_reserved_bytes({MiB, MiB}), 2 * MiB);
  EXPECT_EQ(cuda_reserved_bytes({MiB + 1, MiB + 1}), 4 * MiB);
  // 1 byte still takes a 512 B block, and with it a whole small segment.
  EXPECT_EQ(cuda_reserved_bytes({1}), 2 * MiB);
  EXPECT_EQ(cuda_reserved_bytes({}), 0u);
  // 2.5 MiB -> a 4 MiB segment whose 1.5 MiB remainder is split off: 1.25 MiB fits there. What
  // that leaves (0.25 MiB) stays in the block, so the next 1.25 MiB needs a 2 MiB segment.
  EXPECT_EQ(cuda_reserved_bytes({5 * MiB / 2, 5 * MiB / 4}), 4 * MiB);
  EXPECT_EQ(cuda_reserved_bytes({5 * MiB / 2, 5 * MiB / 4, 5 * MiB / 4}), 6 * MiB);
  // Small blocks never come from a large segment's remainder.
  EXPECT_EQ(cuda_reserved_bytes({5 * MiB / 2, 100}), 6 * MiB);
  // Best fit among the small segments' free space: A keeps 948 KiB after 600 + 500; 1000 opens B
  // (1048 left), 960 fits only B (88 left), 88 takes B's exact rest (not A's), so 948 still fits
  // A. First fit would have opened a third segment.
  EXPECT_EQ(cuda_reserved_bytes({600 * KiB, 500 * KiB, 1000 * KiB, 960 * KiB, 88 * KiB, 948 * KiB}), 4 * MiB);
}

// A hand-made estimate: the GPU total is the device bytes, the rounding, the CUDA context with
// cuBLASLt's workspace, and NCCL's buffers only with more than one rank.
TEST(GpuEstimate, TotalIsDeviceBytesPlusRoundingPlusFixedCosts) {
  MemoryEstimate e;
  e.device_states.params = 3 * MiB + 1;
  e.buckets = 700 * KiB;
  e.activations = 700 * KiB;
  e.by_pool[int(Pool::kDevice)] = 3 * MiB + 1 + 1400 * KiB;
  e.device_allocations = {3 * MiB + 1, 700 * KiB, 700 * KiB};
  const GpuMemoryEstimate one = estimate_gpu_memory(e, 1);
  EXPECT_EQ(one.model_states, 3 * MiB + 1);
  EXPECT_EQ(one.buffers, 700 * KiB);
  EXPECT_EQ(one.activations, 700 * KiB);
  EXPECT_EQ(one.rounding, 6 * MiB - (3 * MiB + 1 + 1400 * KiB));
  EXPECT_EQ(one.context, (500 + 32) * MiB);  // the documented defaults
  EXPECT_EQ(one.nccl, 0u);
  EXPECT_EQ(one.total(), 6 * MiB + 532 * MiB);
  const GpuMemoryEstimate two = estimate_gpu_memory(e, 2);
  EXPECT_EQ(two.nccl, 256 * MiB);  // 2 directions x 32 channels x 4 MiB
  EXPECT_EQ(two.total(), one.total() + 256 * MiB);
  // The verdict: fits up to the byte.
  EXPECT_TRUE(one.fits(one.total()));
  EXPECT_FALSE(one.fits(one.total() - 1));
}

// For a real model: the parts add up to the device pool, the rounding is what the allocator
// reserves for the listed allocations beyond their bytes, and NCCL's share appears with 8 ranks.
TEST(GpuEstimate, RealModelAddsUp) {
  const ModelConfig m = gpt2_small();
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 8}) {
      DsConfig c;
      c.bf16 = true;
      c.zero.stage = stage;
      RunShape run;
      run.world_size = world;
      run.micro_batch = run.eval_batch = 2;
      run.seq_len = 256;
      const MemoryEstimate e = estimate_memory(m, c, run);
      const GpuMemoryEstimate g = estimate_gpu_memory(e, world);
      const std::string where = cat("stage ", stage, ", ", world, " rank(s)");
      EXPECT_EQ(g.model_states + g.buffers + g.activations, e.device_total()) << where;
      size_t listed = 0;
      for (size_t bytes : e.device_allocations) listed += bytes;
      EXPECT_EQ(g.rounding, cuda_reserved_bytes(e.device_allocations) - listed) << where;
      EXPECT_GT(g.rounding, 0u) << where;
      // Each allocation wastes less than one 2 MiB segment.
      EXPECT_LT(g.rounding, e.device_allocations.size() * cuda::kLargeRound) << where;
      EXPECT_EQ(g.total(), e.device_total() + g.rounding + cuda::kContextBytes + cuda::kCublasLtWorkspaceBytes +
                               (world > 1 ? cuda::kNcclBuffersBytes : 0))
          << where;
    }
  }
}

// On a CUDA GPU the recommender fits the GPU view's total: a GPU that holds stage 0's device
// pool but not its context and buffers on top takes a leaner rung.
TEST(Recommender, FitsTheGpuViewOnCuda) {
  const auto [m, base, run, start] = ladder_case();
  Hardware hw = start;
  DsConfig stage0 = base;
  stage0.zero.stage = 0;
  const MemoryEstimate e0 = estimate_memory(m, stage0, run);
  hw.gpu_memory = e0.device_total() + 100 * MiB;
  Recommendation r = recommend(m, base, run, hw);
  ASSERT_EQ(r.chosen, 0);
  EXPECT_EQ(r.rungs[0].gpu_bytes, e0.device_total());
  hw.cuda = true;
  r = recommend(m, base, run, hw);
  ASSERT_GT(r.chosen, 0);
  EXPECT_EQ(r.rungs[0].gpu_bytes, estimate_gpu_memory(e0, 8).total());
  EXPECT_NE(r.rungs[0].why_not.find("GPU "), std::string::npos) << r.rungs[0].why_not;
  const RungVerdict& v = r.rungs[size_t(r.chosen)];
  EXPECT_EQ(v.gpu_bytes, estimate_gpu_memory(v.estimate, 8).total());
  EXPECT_LE(v.gpu_bytes, hw.gpu_memory);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// Where gradients live and what a GPU refuses: ZeroPlan's rules for backends whose kernels cannot
// reach host memory (the CUDA backend) against those that can (CPU, emulated).
TEST(ZeroPlanOnGpu, KeepsGradientsOnTheDeviceAndRefusesDeviceAdamOnHostParameters) {
  DsConfig cfg;
  cfg.source = "ds.json";
  cfg.zero.stage = 3;
  cfg.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;
  EXPECT_TRUE(ZeroPlan(cfg, 1000, 2, 0, /*kernels_reach_host=*/true).grads_on_host);
  EXPECT_FALSE(ZeroPlan(cfg, 1000, 2, 0, /*kernels_reach_host=*/false).grads_on_host);

  cfg.zero.offload_param.device = OffloadConfig::Device::kCpu;
  cfg.zero.offload_optimizer.device = OffloadConfig::Device::kNone;  // the device Adam writes host parameters
  EXPECT_NO_THROW(ZeroPlan(cfg, 1000, 2, 0, true));
  try {
    ZeroPlan(cfg, 1000, 2, 0, false);
    FAIL() << "a GPU plan stepped parameters in host memory on the device";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ds.json: zero_optimization.offload_param"), std::string::npos) << e.what();
  }
  cfg.zero.offload_optimizer.device = OffloadConfig::Device::kCpu;  // the CPU Adam updates them: fine
  EXPECT_NO_THROW(ZeroPlan(cfg, 1000, 2, 0, false));
}

// ZeRO-Inference's plan holds the parameters as training's does and nothing else: offload_param
// on NVMe needs no offload_optimizer there, where a training plan refuses it.
TEST(ZeroPlanForInference, HoldsTheParametersAlone) {
  DsConfig cfg;
  cfg.source = "ds.json";
  cfg.zero.stage = 3;
  cfg.zero.offload_param.device = OffloadConfig::Device::kNvme;
  EXPECT_THROW(ZeroPlan(cfg, 1000, 2, 1), UsageError);
  const ZeroPlan plan = ZeroPlan::inference(cfg, 1000, 2, 1);
  EXPECT_FALSE(plan.training);
  EXPECT_TRUE(plan.params_on_nvme);
  EXPECT_EQ(plan.params_base, plan.partition.begin(1));
  EXPECT_EQ(plan.params_count, plan.partition.partition_size);
  EXPECT_EQ(plan.opt_count + plan.offloaded + plan.device_count + plan.grads_count, 0u);
  cfg.zero.stage = 1;  // stages 0-2: every parameter on every rank
  const ZeroPlan whole = ZeroPlan::inference(cfg, 1000, 2, 1);
  EXPECT_EQ(whole.params_count, whole.partition.padded_size);
}

// zero_estimate's closed forms for a step's traffic (zero/comm_estimate.h) against the sum over
// ranks of each rank's ring (comm/traffic.h), for a payload whose blocks are equal: 8 ranks as 1,
// 2 and 4 nodes, flat and hierarchical, each kind of collective (a broadcast from every rank in
// turn, as ZeRO's allgather_partitions: false shares the partitions).
TEST(CommEstimate, ClosedFormsAreTheRingsSummed) {
  const int p = 8;
  const size_t block = 1000, elem = 2;
  for (int nodes : {1, 2, 4}) {
    for (bool hierarchical : {false, true}) {
      for (int k = 0; k < kCollectives; ++k) {
        const Collective kind = Collective(k);
        const auto traffic = [&](const CollectiveShape& c, int r) {
          return hierarchical ? hier_traffic(c, r, p / nodes, nodes) : ring_traffic(c, r, block_nodes(p, p / nodes));
        };
        Traffic summed;
        for (int r = 0; r < p; ++r) {
          switch (kind) {
            case Collective::kAllReduce: summed += traffic({kind, {p * block}, elem}, r); break;
            case Collective::kBroadcast:
              for (int root = 0; root < p; ++root) summed += traffic({kind, {block}, elem, root}, r);
              break;
            case Collective::kAllToAll: summed += traffic({kind, {block}, elem}, r); break;
            default: summed += traffic({kind, std::vector<size_t>(p, block), elem}, r);
          }
        }
        StepPayload payload;  // what each rank hands the communicator
        payload.bytes[size_t(kind)] = double(p * block * elem);
        const TrafficTotals t = step_traffic(payload, p, nodes, hierarchical);
        const std::string what =
            cat(collective_name(kind), " over ", nodes, " node(s)", hierarchical ? ", hierarchical" : "");
        EXPECT_EQ(t.intra_node[size_t(k)], double(summed.intra_node.sent)) << what;
        EXPECT_EQ(t.inter_node[size_t(k)], double(summed.inter_node.sent)) << what;
      }
    }
  }
}

}  // namespace
}  // namespace zt
