// 1-bit Adam (issue 31): the compressed all-reduce (zero/onebit_compression.h) on the data
// communicator against DeepSpeed's compressed_allreduce written out here for every rank at once,
// over three rounds (the errors carry over), tensors of sizes that pad and that do not, exact
// zeros and negative zeros; and the engine's OneBitAdam training the tiny model with every rank's
// weights alike bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "zero/engine.h"
#include "zero/memory_estimate.h"
#include "zero/onebit_compression.h"
#include "zero_test_harness.h"

namespace zt {
namespace {

// Rank r's momentum element i in round k: irregular, with exact zeros (and -0) among them.
float momentum(int rank, int round, size_t i) {
  if (i % 17 == 3) return (rank + round) % 2 ? 0.0f : -0.0f;
  return std::sin(float(i) * 0.61f + float(rank) * 2.3f + float(round) * 0.7f) * (1.0f + float(i % 5));
}

float sign_of(float x) { return x < 0 ? -1.0f : 1.0f; }  // DeepSpeed's: +1 for 0, -0 and NaN

float rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return float(std::sqrt(s) / std::sqrt(double(x.size())));
}

// DeepSpeed's compressed_allreduce of one tensor over every rank: `ms[r]` rank r's values,
// `worker[r]` its padded error, `server[r]` the error of its chunk. Returns what every rank gets.
std::vector<float> reference_all_reduce(const std::vector<std::vector<float>>& ms, std::vector<std::vector<float>>& worker,
                                        std::vector<std::vector<float>>& server) {
  const size_t p = ms.size(), n = ms[0].size(), padded = worker[0].size(), chunk = padded / p;
  std::vector<std::vector<float>> signs(p, std::vector<float>(padded));
  std::vector<float> scales(p);
  for (size_t r = 0; r < p; ++r) {
    std::vector<float> x(padded);
    for (size_t i = 0; i < padded; ++i) x[i] = (i < n ? ms[r][i] : 0.0f) + worker[r][i];
    scales[r] = rms(x);
    for (size_t i = 0; i < padded; ++i) {
      signs[r][i] = sign_of(x[i]);
      worker[r][i] = x[i] - scales[r] * signs[r][i];
    }
  }
  std::vector<float> out(padded);
  for (size_t s = 0; s < p; ++s) {
    std::vector<float> y(chunk);
    for (size_t j = 0; j < chunk; ++j) {
      float acc = 0;
      for (size_t r = 0; r < p; ++r) acc += signs[r][s * chunk + j] * (scales[r] * (1.0f / float(p)));
      y[j] = acc + server[s][j];
    }
    const float scale = rms(y);
    for (size_t j = 0; j < chunk; ++j) {
      server[s][j] = y[j] - scale * sign_of(y[j]);
      out[s * chunk + j] = scale * sign_of(y[j]);
    }
  }
  out.resize(n);
  return out;
}

TEST(OneBitCompression, MatchesDeepSpeedsCompressedAllReduce) {
  MpiComm world(MPI_COMM_WORLD);
  const int p = world.size();
  if (p < 2) GTEST_SKIP() << "a compressed all-reduce needs 2 or more ranks (one rank compresses nothing)";
  auto backend = test_backend();
  auto comm = make_data_comm(*backend, world);
  // Sizes below, at and above the padding unit (p lcm(p, 8)), one element, and a large one.
  const std::vector<size_t> sizes = {1, 7, 100, 1000, 33, 4096, 64};
  std::vector<std::pair<size_t, size_t>> tensors;
  size_t flat = 0;
  for (size_t n : sizes) {
    tensors.emplace_back(flat, flat + n);
    flat += n;
  }
  OneBitCompression compression(*backend, *comm, tensors);
  Stream& compute = backend->compute_stream();
  DeviceArray<float> m(*backend, flat), v(*backend, flat), master(*backend, flat);
  const std::vector<float> ones(flat, 1.0f), zeros(flat, 0.0f);
  backend->copy_from_host(v.data(), ones.data(), flat * sizeof(float));
  backend->copy_from_host(master.data(), zeros.data(), flat * sizeof(float));
  // Every rank keeps every rank's errors of the reference.
  std::vector<std::vector<std::vector<float>>> worker(sizes.size()), server(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) {
    const size_t padded = OneBitCompression::padded_size(sizes[t], p);
    ASSERT_EQ(padded % size_t(p * 8), 0u) << "size " << sizes[t];
    ASSERT_GE(padded, sizes[t]);
    worker[t].assign(size_t(p), std::vector<float>(padded, 0.0f));
    server[t].assign(size_t(p), std::vector<float>(padded / size_t(p), 0.0f));
  }
  OptimizerStepArgs args;  // the decompression alone: lr 0 leaves the weights, v = 1 masks nothing
  args.rule = UpdateRule::kOneBitAdam;
  args.lr = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> mine(flat);
    for (size_t i = 0; i < flat; ++i) mine[i] = momentum(world.rank(), round, i);
    backend->copy_from_host(m.data(), mine.data(), flat * sizeof(float));
    compression.all_reduce(args, m.data(), nullptr, DType::kF32);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const size_t lo = tensors[t].first;
      backend->optimizer_ops().onebit_apply(args, master.data() + lo, m.data() + lo, v.data() + lo,
                                            compression.gathered(t), master.data() + lo, DType::kF32, sizes[t]);
    }
    std::vector<float> got(flat);
    backend->copy_to_host(got.data(), m.data(), flat * sizeof(float));
    backend->synchronize(compute);
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::vector<std::vector<float>> ms(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) {
        for (size_t i = tensors[t].first; i < tensors[t].second; ++i) ms[size_t(r)].push_back(momentum(r, round, i));
      }
      const std::vector<float> want = reference_all_reduce(ms, worker[t], server[t]);
      for (size_t i = 0; i < want.size(); ++i) {
        const float ours = got[tensors[t].first + i];
        ASSERT_EQ(sign_of(ours), sign_of(want[i])) << "round " << round << " tensor " << t << " element " << i;
        ASSERT_NEAR(ours, want[i], 2e-6f * std::fabs(want[i])) << "round " << round << " tensor " << t << " element " << i;
      }
    }
  }
}

// The tiny model with OneBitAdam at stage 0: the warm-up (10 steps) and the compressed steps after
// it train (the loss falls, stays finite), and every rank ends with the same weights bit for bit:
// the decompressed momentum is the same everywhere, so the replicas never part.
// How far every rank's final weights lie from rank 0's, over all ranks: how many elements differ,
// and the largest difference relative to the weight (at least 1: the attention's key bias, whose
// exact gradient is 0, has a variance of rounding noise squared, and a compressed step moves it by
// a whole sign over that, to |w| ~ 50 here, as DeepSpeed's).
struct ReplicaGap {
  double differing = 0, largest = 0;
};

// Trains `cfg` over the harness's steps (the loss finite and falling below `fall` of where it
// started) and measures the replicas.
ReplicaGap train_replicas(MpiComm& world, const DsConfig& cfg, double fall = 0.9) {
  std::vector<float> master;
  const std::vector<double> losses = train(world, cfg, nullptr, nullptr, &master);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), fall * losses.front());
  std::vector<float> first = master;
  MPI_Bcast(first.data(), int(first.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  ReplicaGap gap;
  for (size_t i = 0; i < master.size(); ++i) {
    gap.differing += master[i] != first[i];
    gap.largest = std::max(gap.largest, std::fabs(double(master[i]) - first[i]) / std::max(1.0, std::fabs(double(first[i]))));
  }
  return {world.all_reduce_sum(gap.differing), world.all_reduce_max(gap.largest)};
}

TEST(OneBitAdamEngine, TrainsAndKeepsEveryReplicaAlike) {
  MpiComm world(MPI_COMM_WORLD);
  DsConfig cfg = make_config(0, DType::kF32, world.size(), 1);
  cfg.optimizer.type = OptimizerConfig::Type::kOneBitAdam;
  cfg.optimizer.bias_correction = false;
  cfg.optimizer.freeze_step = 10;
  cfg.optimizer.lr = 3e-4;
  EXPECT_EQ(train_replicas(world, cfg).differing, 0.0);
}

// The tiny model with ZeroOneAdam at stage 0 over the harness's 30 steps: variance steps and
// 1-bit all-reduced gradients until step 11, then local steps, the ranks meeting every step, then
// every other (local_step_scaler 4, clipper 2). It trains, the replicas part between meetings
// (each rank's own gradients move its weights) and come back together at each meeting, the last
// (step 30) included: apart by rounding alone there, where a missed meeting leaves them their
// local steps apart.
TEST(ZeroOneAdamEngine, TrainsAndTheReplicasMeet) {
  MpiComm world(MPI_COMM_WORLD);
  // fp32, and bf16 with 2 micro-steps a step (each rank's gradient accumulated, never reduced).
  for (const auto& [dtype, accumulation] : {std::pair{DType::kF32, 1}, std::pair{DType::kBF16, 2}}) {
    SCOPED_TRACE(cat(dtype_name(dtype), ", accumulation ", accumulation));
    DsConfig cfg = make_config(0, dtype, world.size(), accumulation);
    cfg.optimizer.type = OptimizerConfig::Type::kZeroOneAdam;
    cfg.optimizer.bias_correction = false;
    cfg.optimizer.lr = 3e-4;
    cfg.optimizer.var_freeze_step = 10;
    cfg.optimizer.var_update_scaler = 2;
    cfg.optimizer.local_step_scaler = 4;
    cfg.optimizer.local_step_clipper = 2;
    ASSERT_EQ(zero_one_local_interval(cfg.optimizer, kSteps), 2);
    // Measured: 1.2e-6 after the meeting (each rank's own rounding of w - u, meeting after
    // meeting), 0.1 with the interval 4, where step 30 is not one.
    EXPECT_LE(train_replicas(world, cfg).largest, 1e-4) << "the replicas after the last meeting";
  }
}

// The tiny model with OneBitLamb at stage 0: Lamb's warm-up to step 10, then every tensor's
// momentum in one compressed all-reduce and each tensor's frozen trust ratio times its factor. It
// trains, and the replicas stay alike bit for bit: the decompressed momenta, and so the factors
// and coefficients, are everyone's. fp32, and bf16 with 2 micro-steps a step (each rank's
// gradient accumulated, never reduced, past the warm-up).
TEST(OneBitLambEngine, TrainsAndKeepsEveryReplicaAlike) {
  MpiComm world(MPI_COMM_WORLD);
  for (const auto& [dtype, accumulation] : {std::pair{DType::kF32, 1}, std::pair{DType::kBF16, 2}}) {
    SCOPED_TRACE(cat(dtype_name(dtype), ", accumulation ", accumulation));
    DsConfig cfg = make_config(0, dtype, world.size(), accumulation);
    cfg.optimizer.type = OptimizerConfig::Type::kOneBitLamb;
    cfg.optimizer.bias_correction = false;
    cfg.optimizer.freeze_step = 10;
    cfg.optimizer.lr = 2e-3;
    cfg.optimizer.weight_decay = 0.01;
    // Lamb's steps on this model are small (its trust ratios): measured 4.607 -> 4.551.
    EXPECT_EQ(train_replicas(world, cfg, 0.995).differing, 0.0);
  }
}

// zero_estimate counts the compression's errors, signs, scales and sums (nothing on one rank,
// where nothing is compressed), ZeroOneAdam's momentum accumulator (4 bytes a parameter),
// OneBitLamb's packed momenta (4) and its exp_avg_sq_fresh (counted with exp_avg_sq), and
// Adam's two moments beside the weights.
TEST(OneBitAdamEngine, EstimateCountsWhatTheEngineHolds) {
  MpiComm world(MPI_COMM_WORLD);
  const ModelConfig model = tiny_model();
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
  auto backend = test_backend();
  auto engine_comm = make_data_comm(*backend, world);
  for (auto type :
       {OptimizerConfig::Type::kOneBitAdam, OptimizerConfig::Type::kZeroOneAdam, OptimizerConfig::Type::kOneBitLamb}) {
    SCOPED_TRACE(optimizer_name(type));
    DsConfig cfg = make_config(0, DType::kBF16, world.size(), 1);
    cfg.optimizer.type = type;
    RunShape run;
    run.world_size = world.size();
    const MemoryEstimate e = estimate_memory(model, cfg, run);
    ZeroEngine engine(*layout, *backend, *engine_comm, world, cfg);
    EXPECT_EQ(engine.buffer_bytes().optimizer, e.optimizer);
    EXPECT_EQ(engine.model_state_bytes().exp_avg, e.device_states.exp_avg);
    EXPECT_EQ(engine.model_state_bytes().exp_avg_sq, e.device_states.exp_avg_sq);
    const bool lamb = type == OptimizerConfig::Type::kOneBitLamb;
    EXPECT_EQ((lamb ? 2 : 1) * engine.model_state_bytes().exp_avg, engine.model_state_bytes().exp_avg_sq);
    const size_t params = layout->num_params();
    // ZeroOneAdam's accumulator spans the flat buffer, OneBitLamb's packed momenta the parameters.
    const size_t accumulator = type != OptimizerConfig::Type::kOneBitAdam ? params * sizeof(float) : 0;
    if (world.size() == 1) {
      EXPECT_GE(e.optimizer, accumulator);  // over the flat buffer, its padding too
      EXPECT_EQ(e.optimizer == 0, accumulator == 0);
    } else {
      // At least the worker's error (the padded model) and the server's (its 1/N).
      EXPECT_GE(e.optimizer, accumulator + (params + params / size_t(world.size())) * sizeof(float));
    }
  }
}

}  // namespace
}  // namespace zt
