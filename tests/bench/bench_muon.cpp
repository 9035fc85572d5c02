// Muon's optimizer step against AdamW's, side by side in one run (issue 31): the same model, the
// same ZeRO stage and ranks, the engine's step() timed alone (reduction, clipping, the update,
// the parameters' all-gather), after one warm-up step, median over --steps. Muon's step adds the
// matrices' exchange and Newton-Schulz (standard and Gram, each a row). Run it under mpirun; rank
// 0 prints the table, the Newton-Schulz arithmetic each rank does (NewtonSchulz::cost, summed
// over the matrices it owns) and the rate that reached, and an OK/FAILED footer against the
// target, Muon's step <= 1.3x AdamW's; every rank exits 1 when it fails.
// Usage: mpirun -np 2 bench_muon [--layers 12 --embd 768 --heads 12 --vocab 50257 --block 64
//        --batch 1 --steps 3 --dtype fp32|bf16 --stage 2]
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "config/tool_options.h"
#include "core/timer.h"
#include "bench_shape.h"
#include "model/causal_lm.h"
#include "zero/engine.h"

using namespace zt;

namespace {

struct Options {
  BenchShape shape = {12, 768, 12, 50257, 64, 1};  // GPT-2 124M, one sequence a rank
  int steps = 3, stage = 2;
  std::string dtype = "fp32";
};

struct Row {
  const char* name;
  OptimizerConfig::Type type;
  OptimizerConfig::NsMethod method;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  MpiComm comm(MPI_COMM_WORLD);
  const bool root = comm.rank() == 0;
  Options o;
  namespace po = boost::program_options;
  po::options_description flags("bench_muon");
  flags.add_options()("help", "this text");
  add_shape_flags(flags, o.shape);
  flags.add_options()
    ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps per optimizer (after one warm-up)")
    ("dtype", po::value(&o.dtype)->default_value(o.dtype), "fp32 or bf16")
    ("stage", po::value(&o.stage)->default_value(o.stage), "ZeRO stage 0-3");
  po::variables_map vm;
  std::string problem;
  bool parsed = true;
  try {
    parsed = parse_tool_command_line(argc, argv, flags, vm, {}, {},
                                     po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
    if (o.dtype != "fp32" && o.dtype != "bf16") problem = "--dtype " + o.dtype + ": fp32 or bf16";
    if (o.steps < 1) problem = "--steps " + std::to_string(o.steps) + ": give 1 or more";
    if (o.stage < 0 || o.stage > 3) problem = "--stage " + std::to_string(o.stage) + ": 0, 1, 2 or 3";
    if (problem.empty()) problem = shape_problem(o.shape);
  } catch (const UsageError& e) {
    problem = e.what();
  }
  if (!problem.empty()) {
    if (root) std::fprintf(stderr, "bench_muon: %s\n", problem.c_str());
    return 2;
  }
  if (!parsed) return 0;
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(shape_model(o.shape));
  const ModelLayout& layout = *layout_ptr;
  auto backend = make_cpu_backend();
  if (root) {
    std::printf("# zerotrain Muon benchmark: %d ranks x %d threads, %s\n", comm.size(), omp_get_max_threads(),
                backend->describe().c_str());
    std::printf("# model %dL %dC vocab %d, Psi = %zu, ZeRO-%d, %s, micro-batch %dx%d per rank\n", o.shape.layers, o.shape.embd,
                o.shape.vocab, layout.num_params(), o.stage, o.dtype.c_str(), o.shape.batch, o.shape.block);
    std::printf("%-16s %12s %10s %16s %12s\n", "optimizer", "step_ms", "ratio", "ns_gflop/rank", "ns_gflop/s");
  }
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), o.shape.batch, o.shape.block, false);
  CausalLM<float>& model = *model_ptr;
  std::vector<int32_t> in(size_t(o.shape.batch) * o.shape.block), tg(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 2654435761u + comm.rank()) % uint64_t(o.shape.vocab));
    tg[i] = int32_t((i * 40503u + 7) % uint64_t(o.shape.vocab));
  }
  const Row rows[] = {{"AdamW", OptimizerConfig::Type::kAdamW, OptimizerConfig::NsMethod::kGram},
                      {"Muon (gram)", OptimizerConfig::Type::kMuon, OptimizerConfig::NsMethod::kGram},
                      {"Muon (standard)", OptimizerConfig::Type::kMuon, OptimizerConfig::NsMethod::kStandard}};
  double adamw_ms = 0, worst_ratio = 0;
  for (const Row& row : rows) {
    DsConfig ds;
    ds.train_micro_batch_size_per_gpu = o.shape.batch;
    ds.train_batch_size = o.shape.batch * comm.size();
    ds.optimizer.type = row.type;
    ds.optimizer.lr = ds.optimizer.muon_lr = 0.02;
    ds.optimizer.adam_lr = 3e-4;
    ds.optimizer.ns_method = row.method;
    ds.gradient_clipping = 1.0;
    ds.bf16 = o.dtype == "bf16";
    ds.zero.stage = o.stage;
    ds.zero.reduce_bucket_size = 50'000'000;
    ds.zero.allgather_bucket_size = 50'000'000;
    auto engine_comm = make_data_comm(*backend, comm);
    ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
    engine.init_params(1);
    // The Newton-Schulz arithmetic this rank owns (2 flops a multiply-add).
    double gflop = 0;
    if (row.type == OptimizerConfig::Type::kMuon) {
      const auto matrices = MuonMatrices::assign(layout.tensor_ranges(), layout.tensor_shapes(),
                                                 MuonMatrices::held_ranges(ZeroPlan(ds, layout.flat_size(), comm.size(),
                                                                                    comm.rank(), true, DType::kF32)),
                                                 ds.optimizer);
      for (const auto& m : matrices) {
        if (m.owner == comm.rank()) gflop += 2e-9 * NewtonSchulz::cost(row.method, 5, m.rows, m.cols);
      }
    }
    std::vector<double> times;
    for (int s = 0; s <= o.steps; ++s) {  // step 0 warms up
      model.forward(engine, in.data(), tg.data(), o.shape.batch, o.shape.block);
      model.backward(engine, engine.backward_scale());
      comm.barrier()->wait();
      Stopwatch clock;
      engine.step();
      comm.barrier()->wait();  // the slowest rank's step
      if (s > 0) times.push_back(clock.ms());
    }
    const double ms = median(times);
    if (row.type == OptimizerConfig::Type::kAdamW) adamw_ms = ms;
    const double ratio = ms / adamw_ms;
    worst_ratio = std::max(worst_ratio, row.type == OptimizerConfig::Type::kMuon && row.method == OptimizerConfig::NsMethod::kGram ? ratio : 0.0);
    // The largest share of Newton-Schulz work any rank has (the step waits for it).
    const double most = comm.all_reduce_max(gflop);
    if (root) {
      std::printf("%-16s %12.1f %10.2f %16.1f %12.1f\n", row.name, ms, ratio, most,
                  most > 0 ? most / (ms / 1000.0) : 0.0);
    }
  }
  const bool ok = worst_ratio <= 1.3;
  if (root) {
    std::printf("RESULT adamw_ms=%.1f muon_ratio=%.2f (target <= 1.30: DeepSpeed's default Gram method)\n%s\n",
                adamw_ms, worst_ratio, ok ? "OK" : "FAILED");
  }
  return ok ? 0 : 1;
}
