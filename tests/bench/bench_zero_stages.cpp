// Step time of ZeRO stages 0-3 side by side in one run, and the bytes every collective moved,
// next to the ZeRO paper's volumes (2Ψ elements per step for stages 0-2, 3Ψ for stage 3). Run it
// under mpirun; rank 0 prints fixed columns (ratio/sN: relative to the first stage listed, in
// whatever order --stages lists them) and an OK/FAILED footer against the targets, which are
// relative to stage 0 (stage 1 and 2 <= 1.05x stage 0, stage 3 <= 1.25x stage 0). Every rank
// checks its own times; the verdict, and the exit status of every rank, is FAILED if any rank's
// check failed. Without stage 0 in --stages there is nothing to check against, and a line says so.
// A bad flag or value (an unknown flag, --steps 0, a stage that is not 0-3) is one line on stderr
// and exit status 2.
// Usage: mpirun -np 2 bench_zero_stages [--layers 12 --embd 768 --heads 12 --vocab 50257
//        --block 64 --batch 4 --steps 3 --rounds 2 --dtype fp32|bf16 --stages 0123 --overlap 1|0]
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
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
  BenchShape shape;  // GPT-2 124M, 4 sequences a rank
  int steps = 3, rounds = 2;
  std::string dtype = "fp32", stages = "0123";
  bool overlap = true;
  std::vector<int> stage_list;  // --stages as numbers, in the order given
};

// Reads argv into `o` through the tools' parser (an unknown flag or a value that is not a number
// is a UsageError). Returns what is wrong with the values in one line naming the flag, or "" when
// they are usable: in particular every stage gets at least one timed sample, since step 0 of each
// round is a warm-up and each stage's time is a median. False from `parsed`: --help was printed.
std::string parse_options(int argc, char** argv, Options& o, bool& parsed) {
  namespace po = boost::program_options;
  po::options_description flags("bench_zero_stages");
  flags.add_options()("help", "this text");
  add_shape_flags(flags, o.shape);
  flags.add_options()
    ("steps", po::value(&o.steps)->default_value(o.steps), "steps per stage and round (the first is a warm-up)")
    ("rounds", po::value(&o.rounds)->default_value(o.rounds), "rounds over the stages")
    ("dtype", po::value(&o.dtype)->default_value(o.dtype), "fp32 or bf16")
    ("stages", po::value(&o.stages)->default_value(o.stages), "the stages to run, in order")
    ("overlap", po::value<std::string>()->default_value("1"), "overlap_comm: 0 or 1");
  po::variables_map vm;
  // No prefixes: a mistyped flag (--step) is an error, not a guess.
  parsed = parse_tool_command_line(argc, argv, flags, vm, {}, {},
                                   po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
  if (!parsed) return "";
  const std::string overlap = vm["overlap"].as<std::string>();
  if (overlap != "0" && overlap != "1") return "--overlap " + overlap + ": 0 or 1";
  o.overlap = overlap == "1";
  if (o.dtype != "fp32" && o.dtype != "bf16") return "--dtype " + o.dtype + ": fp32 or bf16";
  if (o.steps < 1) {
    return "--steps " + std::to_string(o.steps) + " leaves no timed samples (step 0 of each round is a warm-up): "
           "give --steps 1 or more";
  }
  if (o.rounds < 1) return "--rounds " + std::to_string(o.rounds) + " leaves no timed samples: give --rounds 1 or more";
  if (std::string problem = shape_problem(o.shape); !problem.empty()) return problem;
  if (o.stages.empty()) return "--stages is empty: give the stages to run, such as 0123";
  for (char c : o.stages) {
    const int stage = c - '0';
    if (c < '0' || c > '3') return "--stages " + o.stages + ": '" + c + "' is not a stage (0, 1, 2 or 3)";
    if (std::find(o.stage_list.begin(), o.stage_list.end(), stage) != o.stage_list.end()) {
      return "--stages " + o.stages + ": stage " + c + " is listed twice";
    }
    o.stage_list.push_back(stage);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  MpiComm comm(MPI_COMM_WORLD);
  const bool root = comm.rank() == 0;
  Options options;
  // Every rank reads the same argv and reaches the same answer: rank 0 says it, all exit 2.
  std::string problem;
  bool parsed = true;
  try {
    problem = parse_options(argc, argv, options, parsed);
  } catch (const UsageError& e) {
    problem = e.what();
  }
  if (!problem.empty()) {
    if (root) std::fprintf(stderr, "bench_zero_stages: %s\n", problem.c_str());
    return 2;
  }
  if (!parsed) return 0;  // --help
  const BenchShape& shape = options.shape;
  const int layers = shape.layers, embd = shape.embd, vocab = shape.vocab;
  const int block = shape.block, batch = shape.batch, steps = options.steps, rounds = options.rounds;
  const std::string& dtype = options.dtype;
  const bool overlap = options.overlap;
  const std::vector<int>& stage_list = options.stage_list;
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(shape_model(shape));
  const ModelLayout& layout = *layout_ptr;
  const double psi = double(layout.num_params());
  auto backend = make_cpu_backend();
  if (root) {
    std::printf("# zerotrain ZeRO stage benchmark: %d ranks x %d threads, %s\n", comm.size(), omp_get_max_threads(),
                backend->describe().c_str());
    std::printf("# model %dL %dC vocab %d, Psi = %.0f, micro-batch %dx%d per rank, %s\n", layers, embd, vocab, psi,
                batch, block, dtype.c_str());
    const std::string ratio_heading = "ratio/s" + std::to_string(stage_list[0]);
    std::printf("%6s %10s %8s %14s %14s %14s %12s %12s\n", "stage", "step_ms", ratio_heading.c_str(),
                "all_reduce_B", "reduce_scat_B", "all_gather_B", "elems/Psi", "paper");
  }
  // The stages take turns, `steps` steps each, and the whole sequence runs `rounds` times, so
  // the machine's drift (shared and noisy) hits all of them alike. One engine exists at a time.
  const size_t S = stage_list.size();
  std::vector<std::vector<double>> times(S), step_times(S);
  std::vector<CommStats> per_step(S);
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), batch, block, false);
  CausalLM<float>& model = *model_ptr;
  std::vector<int32_t> in(size_t(batch) * block), tg(size_t(batch) * block);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 2654435761u + comm.rank()) % uint64_t(vocab));
    tg[i] = int32_t((i * 40503u + 7) % uint64_t(vocab));
  }
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < S; ++i) {
      DsConfig ds;
      ds.train_micro_batch_size_per_gpu = batch;
      ds.train_batch_size = batch * comm.size();
      ds.optimizer.lr = 1e-4;
      ds.gradient_clipping = 1.0;
      ds.bf16 = dtype == "bf16";
      ds.zero.stage = stage_list[i];
      ds.zero.overlap_comm = overlap;
      ds.zero.reduce_bucket_size = 50'000'000;
      ds.zero.allgather_bucket_size = 50'000'000;
      // Stage 3 as the paper counts it: release every unit after use, gather again in backward.
      ds.zero.stage3_max_reuse_distance = 0;
      ds.zero.stage3_param_persistence_threshold = 0;
      auto engine_comm = make_data_comm(*backend, comm);
      ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
      engine.init_params(1);
      for (int s = 0; s <= steps; ++s) {  // step 0 warms up (and records stage 3's trace)
        comm.barrier()->wait();
        engine_comm->reset_stats();  // the data communicator's own (shm or mpi)
        Stopwatch clock;
        model.forward(engine, in.data(), tg.data(), batch, block);
        model.backward(engine, engine.backward_scale());
        Stopwatch step_clock;
        engine.step();
        const double step_ms = step_clock.ms();
        comm.barrier()->wait();
        if (s == 0) continue;
        times[i].push_back(clock.ms());
        step_times[i].push_back(step_ms);
        per_step[i] = engine_comm->stats();
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> medians(4, 0.0);
  for (size_t i = 0; i < S; ++i) medians[size_t(stage_list[i])] = median(times[i]);
  const bool have_stage0 = std::find(stage_list.begin(), stage_list.end(), 0) != stage_list.end();
  // This rank's time of each stage over stage 0's, the quantity the targets bound; row `rank` of
  // a world x 4 table that the max-reduce below fills with every rank's row (the others are 0).
  const size_t world = size_t(comm.size()), me = size_t(comm.rank());
  std::vector<double> vs_stage0(world * 4, 0.0);
  for (size_t i = 0; i < S; ++i) {
    const int stage = stage_list[i];
    // Relative to the first listed stage, whichever that is (the column's heading names it).
    const double ratio = medians[size_t(stage)] / medians[size_t(stage_list[0])];
    if (have_stage0) vs_stage0[me * 4 + size_t(stage)] = medians[size_t(stage)] / medians[0];
    // Elements moved per step by this rank's calls, in units of Psi: an all-reduce counts twice
    // (reduce-scatter + all-gather, as the paper counts it), the others once.
    const double elem = dtype == "fp32" ? 4.0 : 2.0;
    const CommStats& cs = per_step[i];
    const double volume =
        (2.0 * double(cs.all_reduce) + double(cs.reduce_scatter) + double(cs.all_gather) + double(cs.broadcast)) /
        elem / psi;
    const double paper = stage == 3 ? 3.0 : 2.0;
    if (root) {
      std::printf("%6d %10.1f %8.2f %14llu %14llu %14llu %12.2f %12.1f\n", stage, medians[size_t(stage)], ratio,
                  (unsigned long long)cs.all_reduce, (unsigned long long)cs.reduce_scatter,
                  (unsigned long long)cs.all_gather, volume, paper);
    }
    if (root) {
      std::printf("#        all steps (ms):");
      for (double t : times[i]) std::printf(" %.0f", t);
      std::printf("; optimizer step (reduce, Adam, share) median %.1f ms\n", median(step_times[i]));
    }
  }
  // Agree before the verdict: every rank's times count, not only rank 0's (a rank can be slow
  // alone, on a busier core or node). Collective on every rank, whatever the stages.
  comm.all_reduce_doubles(vs_stage0, true);
  bool ok = true;
  if (have_stage0) {
    for (size_t r = 0; r < world; ++r) {
      for (int stage : stage_list) {
        if (stage == 0) continue;
        const double limit = stage == 3 ? 1.25 : 1.05;
        const double x = vs_stage0[r * 4 + size_t(stage)];
        if (x <= limit) continue;
        ok = false;
        if (root) std::printf("# rank %zu: stage %d took %.2fx stage 0's time (target <= %.2fx)\n", r, stage, x, limit);
      }
    }
  } else if (root) {
    std::printf("# targets not checked: they are relative to stage 0, which --stages %s does not list\n",
                options.stages.c_str());
  }
  if (root) std::printf("RESULT stage0_ms=%.1f stage1_ms=%.1f stage2_ms=%.1f stage3_ms=%.1f\n%s\n", medians[0],
                        medians[1], medians[2], medians[3], ok ? "OK" : "FAILED");
  // The footer's verdict, agreed above, is every rank's exit status, so mpirun fails too.
  return ok ? 0 : 1;
}
