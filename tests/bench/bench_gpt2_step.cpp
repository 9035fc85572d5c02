// Step time of one training step (forward, backward, Adam) for a GPT-2 shape on one rank, and the
// same run's OpenBLAS sgemm rate on the model's own GEMM shapes, so achieved GFLOP/s is judged
// against what the BLAS delivers on this machine today (nccl-tests style: fixed columns, a
// footer). Usage: bench_gpt2_step [--layers 12 --embd 768 --heads 12 --vocab 50257 --positions 1024 --block 64
//                                  --batch 4 --steps 5 --dtype fp32 --checkpointing 0]
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/data_comm.h"
#include "backend/cpu/gemm.h"
#include "core/timer.h"
#include "comm/self_comm.h"
#include "model/causal_lm.h"
#include "zero/engine.h"

using namespace zt;

namespace {

struct Options {
  int layers = 12, embd = 768, heads = 12, vocab = 50257, positions = 1024, block = 64, batch = 4, steps = 5;
  std::string dtype = "fp32";
  bool checkpointing = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--layers") o.layers = std::atoi(v.c_str());
    else if (k == "--embd") o.embd = std::atoi(v.c_str());
    else if (k == "--heads") o.heads = std::atoi(v.c_str());
    else if (k == "--vocab") o.vocab = std::atoi(v.c_str());
    else if (k == "--positions") o.positions = std::atoi(v.c_str());
    else if (k == "--block") o.block = std::atoi(v.c_str());
    else if (k == "--batch") o.batch = std::atoi(v.c_str());
    else if (k == "--steps") o.steps = std::atoi(v.c_str());
    else if (k == "--dtype") o.dtype = v;
    else if (k == "--checkpointing") o.checkpointing = v == "1";
    else {
      std::fprintf(stderr, "bench_gpt2_step: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Median seconds of `reps` runs of C[M,N] = A[M,K] op B.
double time_gemm(bool ta, bool tb, int M, int N, int K, int reps) {
  std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N, 0.0f);
  std::vector<double> times;
  cpu::gemm(ta, tb, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data());  // warm-up
  for (int r = 0; r < reps; ++r) {
    Stopwatch w;
    cpu::gemm(ta, tb, M, N, K, 1.0f, A.data(), B.data(), 1.0f, C.data());
    times.push_back(w.seconds());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ModelConfig mc;
  mc.n_layer = o.layers;
  mc.n_embd = o.embd;
  mc.n_head = o.heads;
  mc.vocab_size = o.vocab;
  mc.n_positions = std::max(o.block, o.positions);
  DsConfig ds;
  ds.train_micro_batch_size_per_gpu = o.batch;
  ds.train_batch_size = o.batch;
  ds.optimizer.lr = 1e-4;
  ds.gradient_clipping = 1.0;
  ds.bf16 = o.dtype == "bf16";
  ds.fp16.enabled = o.dtype == "fp16";

  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(mc);
  const ModelLayout& layout = *layout_ptr;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, ds);
  engine.init_params(1);
  const auto model_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), o.batch, o.block, o.checkpointing);
  CausalLM<float>& model = *model_ptr;
  const int BT = o.batch * o.block;
  std::vector<int32_t> in(BT), tg(BT);
  for (int i = 0; i < BT; ++i) {
    in[i] = int32_t((uint64_t(i) * 2654435761u) % uint64_t(o.vocab));
    tg[i] = int32_t((uint64_t(i + 1) * 2654435761u) % uint64_t(o.vocab));
  }

  std::printf("# zerotrain GPT-2 step benchmark: %s, %d threads\n", backend->describe().c_str(), omp_get_max_threads());
  std::printf("# model %dL %dC %dH vocab %d, %zu params, batch %dx%d, %s%s\n", o.layers, o.embd, o.heads, o.vocab,
              layout.num_params(), o.batch, o.block, o.dtype.c_str(), o.checkpointing ? ", checkpointing" : "");
  std::printf("%8s %12s %12s %12s %12s %12s\n", "step", "total_ms", "forward_ms", "backward_ms", "adam_ms", "GFLOP/s");
  const double flops = 3.0 * model.flops_per_token_forward(o.block) * BT;
  std::vector<double> totals;
  for (int s = 0; s <= o.steps; ++s) {  // step 0 is a warm-up and is not counted
    Stopwatch total, part;
    model.forward(engine, in.data(), tg.data(), o.batch, o.block);
    double fwd = part.ms();
    part.reset();
    model.backward(engine, engine.backward_scale());
    double bwd = part.ms();
    part.reset();
    engine.step();
    double adam = part.ms();
    double ms = total.ms();
    std::printf("%8d %12.1f %12.1f %12.1f %12.1f %12.1f%s\n", s, ms, fwd, bwd, adam, flops / (ms * 1e6),
                s == 0 ? "  (warm-up)" : "");
    if (s > 0) totals.push_back(ms);
  }
  std::sort(totals.begin(), totals.end());
  const double median_ms = totals[totals.size() / 2];

  // The model's GEMMs (forward and both backward products), timed in isolation.
  struct Shape { bool ta, tb; int M, N, K, count; };
  const int C = o.embd, V = o.vocab, L = o.layers;
  const Shape shapes[] = {
      {false, false, BT, 3 * C, C, 3 * L}, {false, false, BT, C, C, 3 * L}, {false, false, BT, 4 * C, C, 3 * L},
      {false, false, BT, C, 4 * C, 3 * L}, {false, true, BT, V, C, 3}};
  double gemm_seconds = 0, gemm_flops = 0;
  for (const Shape& sh : shapes) {
    double t = time_gemm(sh.ta, sh.tb, sh.M, sh.N, sh.K, 5);
    gemm_seconds += t * sh.count;
    gemm_flops += 2.0 * sh.M * sh.N * sh.K * sh.count;
  }
  const double sgemm_rate = gemm_flops / gemm_seconds / 1e9;
  const double achieved = flops / (median_ms * 1e6);
  std::printf("# median step: %.1f ms, %.0f tokens/s\n", median_ms, BT / (median_ms / 1e3));
  std::printf("# achieved: %.1f GFLOP/s; OpenBLAS sgemm on the same shapes: %.1f GFLOP/s; ratio %.2f\n", achieved,
              sgemm_rate, achieved / sgemm_rate);
  std::printf("RESULT step_ms=%.2f achieved_gflops=%.2f sgemm_gflops=%.2f\n", median_ms, achieved, sgemm_rate);
  return 0;
}
