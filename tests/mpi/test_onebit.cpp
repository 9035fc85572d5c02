// 1-bit Adam (issue 31): the compressed all-reduce (zero/onebit_compression.h) on the data
// communicator against DeepSpeed's compressed_allreduce written out here for every rank at once,
// over three rounds (the errors carry over), tensors of sizes that pad and that do not, exact
// zeros and negative zeros; and the engine's OneBitAdam training the tiny model with every rank's
// weights alike bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
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
TEST(OneBitAdamEngine, TrainsAndKeepsEveryReplicaAlike) {
  MpiComm world(MPI_COMM_WORLD);
  DsConfig cfg = make_config(0, DType::kF32, world.size(), 1);
  cfg.optimizer.type = OptimizerConfig::Type::kOneBitAdam;
  cfg.optimizer.bias_correction = false;
  cfg.optimizer.freeze_step = 10;
  cfg.optimizer.lr = 3e-4;
  std::vector<float> master;
  const std::vector<double> losses = train(world, cfg, nullptr, nullptr, &master);
  for (double l : losses) ASSERT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), 0.9 * losses.front());
  // Rank 0's weights against every rank's.
  std::vector<float> first = master;
  MPI_Bcast(first.data(), int(first.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  size_t differ = 0;
  for (size_t i = 0; i < master.size(); ++i) differ += master[i] != first[i];
  EXPECT_EQ(world.all_reduce_sum(double(differ)), 0.0);
}

// zero_estimate counts the compression's errors, signs, scales and sums (nothing on one rank,
// where nothing is compressed), and Adam's two moments beside the weights.
TEST(OneBitAdamEngine, EstimateCountsWhatTheEngineHolds) {
  MpiComm world(MPI_COMM_WORLD);
  const ModelConfig model = tiny_model();
  const std::unique_ptr<ModelLayout> layout = make_model_layout(model);
  auto backend = test_backend();
  auto engine_comm = make_data_comm(*backend, world);
  DsConfig cfg = make_config(0, DType::kBF16, world.size(), 1);
  cfg.optimizer.type = OptimizerConfig::Type::kOneBitAdam;
  RunShape run;
  run.world_size = world.size();
  const MemoryEstimate e = estimate_memory(model, cfg, run);
  ZeroEngine engine(*layout, *backend, *engine_comm, world, cfg);
  EXPECT_EQ(engine.buffer_bytes().optimizer, e.optimizer);
  EXPECT_EQ(engine.model_state_bytes().exp_avg, e.device_states.exp_avg);
  EXPECT_EQ(engine.model_state_bytes().exp_avg_sq, e.device_states.exp_avg_sq);
  EXPECT_EQ(engine.model_state_bytes().exp_avg, engine.model_state_bytes().exp_avg_sq);
  if (world.size() == 1) {
    EXPECT_EQ(e.optimizer, 0u);
  } else {
    // At least the worker's error (the padded model) and the server's (its 1/N).
    const size_t params = layout->num_params();
    EXPECT_GE(e.optimizer, (params + params / size_t(world.size())) * sizeof(float));
  }
}

}  // namespace
}  // namespace zt
