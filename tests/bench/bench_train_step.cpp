// Step time of one training step (forward, backward, Adam) on one rank, for a GPT-2 shape given by
// flags or any architecture's HF config.json (--config), and the same run's OpenBLAS sgemm rate on
// the model's own GEMM shapes, so achieved GFLOP/s is judged against what the BLAS delivers on this
// machine today (nccl-tests style: fixed columns, a footer). --profile 1 times every kernel op
// (the CPU backend runs them synchronously) and prints where a step's time goes. The run's peak
// bytes in the device pool (the memory pools' measurement: parameters, states, activations and
// scratch) close the report.
// Usage: bench_train_step [--config config.json | --layers 12 --embd 768 --heads 12 --vocab 50257
//                          --positions 1024] [--block 64 --batch 4 --steps 5 --dtype fp32
//                          --activation_dtype fp32|bf16 --checkpointing 0 --profile 0]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "comm/data_comm.h"
#include "comm/self_comm.h"
#include "core/memory_pool.h"
#include "core/timer.h"
#include "model/causal_lm.h"
#include "zero/engine.h"
#include "zero/engine_model.h"

using namespace zt;

namespace {

struct Options {
  std::string config;  // an HF config.json; when empty, the GPT-2 shape of the flags below
  int layers = 12, embd = 768, heads = 12, vocab = 50257, positions = 1024, block = 64, batch = 4, steps = 5;
  int accumulation = 1;  // micro-steps a step (gradient_accumulation_steps)
  std::string dtype = "fp32", activation_dtype = "fp32";
  bool checkpointing = false, profile = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") o.config = v;
    else if (k == "--layers") o.layers = std::atoi(v.c_str());
    else if (k == "--embd") o.embd = std::atoi(v.c_str());
    else if (k == "--heads") o.heads = std::atoi(v.c_str());
    else if (k == "--vocab") o.vocab = std::atoi(v.c_str());
    else if (k == "--positions") o.positions = std::atoi(v.c_str());
    else if (k == "--block") o.block = std::atoi(v.c_str());
    else if (k == "--batch") o.batch = std::atoi(v.c_str());
    else if (k == "--steps") o.steps = std::atoi(v.c_str());
    else if (k == "--accumulation") o.accumulation = std::atoi(v.c_str());
    else if (k == "--dtype") o.dtype = v;
    else if (k == "--activation_dtype") o.activation_dtype = v;
    else if (k == "--checkpointing") o.checkpointing = v == "1";
    else if (k == "--profile") o.profile = v == "1";
    else {
      std::fprintf(stderr, "bench_train_step: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "bench_train_step: option %s has no value\n", argv[argc - 1]);
    std::exit(2);
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

// The model's weight GEMMs: C[BT, N] = x[BT, K] op W, each run `count` times a step (forward, and
// backward's dx and dweight products).
struct GemmShape {
  bool ta, tb;
  int M, N, K, count;
};

std::vector<GemmShape> model_gemms(const ModelConfig& mc, int BT) {
  const int C = mc.n_embd, V = mc.vocab_size, L = mc.n_layer;
  if (mc.architecture() == Architecture::kGpt2) {  // Conv1D weights [in, out]; the tied lm_head
    return {{false, false, BT, 3 * C, C, 3 * L}, {false, false, BT, C, C, 3 * L}, {false, false, BT, 4 * C, C, 3 * L},
            {false, false, BT, C, 4 * C, 3 * L}, {false, true, BT, V, C, 3}};
  }
  // nn.Linear weights [out, in]: q, k, v, o, gate, up, down and the lm_head.
  const int q = mc.n_head * mc.head_size(), kv = mc.kv_heads() * mc.head_size(), I = mc.intermediate_size;
  return {{false, true, BT, q, C, 3 * L},  {false, true, BT, kv, C, 6 * L}, {false, true, BT, C, q, 3 * L},
          {false, true, BT, I, C, 6 * L},  {false, true, BT, C, I, 3 * L},  {false, true, BT, V, C, 3}};
}

// Times every kernel op of the wrapped table (the CPU backend's run synchronously on the calling
// thread, so a call's wall time is the op's time): --profile's breakdown of a step.
class TimedOps final : public KernelOps<float> {
 public:
  explicit TimedOps(KernelOps<float>& inner) : in_(inner) {}
  std::map<std::string, std::pair<double, long>>& totals() { return totals_; }  // name -> (ms, calls)

#define ZT_TIMED(name, params, args)            \
  void name params override {                   \
    Stopwatch timer_;                           \
    in_.name args;                              \
    auto& total_ = totals_[#name];              \
    total_.first += timer_.ms();                \
    total_.second += 1;                         \
  }
  ZT_TIMED(embedding_forward, (float* o, const int32_t* t, const float* a, const float* b, int B, int T_, int C),
           (o, t, a, b, B, T_, C))
  ZT_TIMED(embedding_backward, (float* a, float* b, const float* d, const int32_t* t, int B, int T_, int C),
           (a, b, d, t, B, T_, C))
  ZT_TIMED(layernorm_forward,
           (float* o, float* m, float* r, const float* x, const float* w, const float* b, int rows, int C, double e),
           (o, m, r, x, w, b, rows, C, e))
  ZT_TIMED(layernorm_backward,
           (float* dx, float* dw, float* db, const float* d, const float* x, const float* w, const float* m,
            const float* r, int rows, int C),
           (dx, dw, db, d, x, w, m, r, rows, C))
  ZT_TIMED(matmul_forward, (float* o, const float* x, const float* w, const float* b, int r, int i, int n),
           (o, x, w, b, r, i, n))
  ZT_TIMED(matmul_backward,
           (float* dx, float* dw, float* db, const float* d, const float* x, const float* w, int r, int i, int n),
           (dx, dw, db, d, x, w, r, i, n))
  ZT_TIMED(attention_forward, (float* o, float* a, const float* q, int B, int T_, int C, int NH),
           (o, a, q, B, T_, C, NH))
  ZT_TIMED(attention_backward,
           (float* d, const float* g, const float* o, const float* q, const float* a, int B, int T_, int C, int NH),
           (d, g, o, q, a, B, T_, C, NH))
  ZT_TIMED(gelu_forward, (float* o, const float* x, size_t n), (o, x, n))
  ZT_TIMED(gelu_backward, (float* d, const float* x, const float* o, size_t n), (d, x, o, n))
  ZT_TIMED(residual_forward, (float* o, const float* a, const float* b, size_t n), (o, a, b, n))
  ZT_TIMED(accumulate, (float* a, const float* x, size_t n), (a, x, n))
  ZT_TIMED(softmax_xent_forward, (float* l, float* s, const int32_t* t, int r, int V, double* sum, double w),
           (l, s, t, r, V, sum, w))
  ZT_TIMED(softmax_xent_backward, (float* p, const int32_t* t, int r, int V, double d), (p, t, r, V, d))
  ZT_TIMED(linear_forward, (float* o, const float* x, const float* w, const float* b, int r, int i, int n),
           (o, x, w, b, r, i, n))
  ZT_TIMED(linear_backward,
           (float* dx, float* dw, float* db, const float* d, const float* x, const float* w, int r, int i, int n,
            bool acc),
           (dx, dw, db, d, x, w, r, i, n, acc))
  ZT_TIMED(rmsnorm_forward, (float* o, float* r, const float* x, const float* w, int rows, int C, double e),
           (o, r, x, w, rows, C, e))
  ZT_TIMED(rmsnorm_backward,
           (float* dx, float* dw, const float* d, const float* x, const float* w, const float* r, int rows, int C),
           (dx, dw, d, x, w, r, rows, C))
  ZT_TIMED(rotary, (float* x, const float* c, const float* s, int B, int T_, int h, int hs, bool inv),
           (x, c, s, B, T_, h, hs, inv))
  ZT_TIMED(gqa_attention_forward,
           (float* o, float* a, const float* q, const float* k, const float* v, int B, int Tq, int Tk, int NH,
            int NKV, int hs),
           (o, a, q, k, v, B, Tq, Tk, NH, NKV, hs))
  ZT_TIMED(gqa_attention_backward,
           (float* dq, float* dk, float* dv, const float* d, const float* o, const float* q, const float* k,
            const float* v, const float* a, int B, int T_, int NH, int NKV, int hs),
           (dq, dk, dv, d, o, q, k, v, a, B, T_, NH, NKV, hs))
  ZT_TIMED(swiglu_forward, (float* o, const float* g, const float* u, size_t n), (o, g, u, n))
  ZT_TIMED(swiglu_backward, (float* dg, float* du, const float* d, const float* g, const float* u, size_t n),
           (dg, du, d, g, u, n))
#undef ZT_TIMED

 private:
  KernelOps<float>& in_;
  std::map<std::string, std::pair<double, long>> totals_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ModelConfig mc;
  if (!o.config.empty()) {
    mc = load_model_config(o.config);
  } else {
    mc.n_layer = o.layers;
    mc.n_embd = o.embd;
    mc.n_head = o.heads;
    mc.vocab_size = o.vocab;
    mc.n_positions = std::max(o.block, o.positions);
  }
  DsConfig ds;
  ds.train_micro_batch_size_per_gpu = o.batch;
  ds.gradient_accumulation_steps = std::max(1, o.accumulation);
  ds.train_batch_size = o.batch * ds.gradient_accumulation_steps;
  ds.optimizer.lr = 1e-4;
  ds.gradient_clipping = 1.0;
  ds.bf16 = o.dtype == "bf16";
  ds.fp16.enabled = o.dtype == "fp16";

  if (o.activation_dtype != "fp32" && o.activation_dtype != "bf16") {
    std::fprintf(stderr, "--activation_dtype: fp32 or bf16, got '%s'\n", o.activation_dtype.c_str());
    return 2;
  }
  const DType activations = o.activation_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  if (o.profile && activations != DType::kF32) {
    std::fprintf(stderr, "--profile 1 times the fp32 kernel table: --activation_dtype fp32 only\n");
    return 2;
  }

  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(mc);
  const ModelLayout& layout = *layout_ptr;
  SelfComm comm;
  auto engine_comm = make_data_comm(*backend, comm);
  ZeroEngine engine(layout, *backend, *engine_comm, comm, ds, activations);
  engine.init_params(1);
  TimedOps timed(backend->ops());
  KernelOps<float>& ops = o.profile ? static_cast<KernelOps<float>&>(timed) : backend->ops();
  const std::unique_ptr<BoundModel> model_ptr =
      make_engine_model(engine, layout, *backend, ops, backend->ops_bf16(), o.batch, o.block, o.checkpointing);
  BoundModel& model = *model_ptr;
  const int BT = o.batch * o.block;
  std::vector<int32_t> in(BT), tg(BT);
  for (int i = 0; i < BT; ++i) {
    in[i] = int32_t((uint64_t(i) * 2654435761u) % uint64_t(mc.vocab_size));
    tg[i] = int32_t((uint64_t(i + 1) * 2654435761u) % uint64_t(mc.vocab_size));
  }

  std::printf("# zerotrain %s step benchmark: %s, %d threads\n", mc.model_type.c_str(), backend->describe().c_str(),
              omp_get_max_threads());
  std::printf("# model %s: %dL %dC %dH", o.config.empty() ? "gpt2" : o.config.c_str(), mc.n_layer, mc.n_embd,
              mc.n_head);
  if (mc.architecture() == Architecture::kLlama) {
    std::printf(" %dKV I%d%s", mc.n_kv_head, mc.intermediate_size, mc.tie_word_embeddings ? " tied" : " untied");
  }
  std::printf(" vocab %d, %zu params, batch %dx%d x %d micro-steps, %s, %s activations%s\n", mc.vocab_size,
              layout.num_params(), o.batch, o.block, int(ds.gradient_accumulation_steps), o.dtype.c_str(),
              o.activation_dtype.c_str(), o.checkpointing ? ", checkpointing" : "");
  std::printf("%8s %12s %12s %12s %12s %12s\n", "step", "total_ms", "forward_ms", "backward_ms", "adam_ms", "GFLOP/s");
  const double flops = 3.0 * model.flops_per_token_forward(o.block) * BT * ds.gradient_accumulation_steps;
  std::vector<double> totals;
  double adam_total = 0;
  for (int s = 0; s <= o.steps; ++s) {  // step 0 is a warm-up and is not counted
    if (s == 1) timed.totals().clear();
    Stopwatch total, part;
    double fwd = 0, bwd = 0;
    for (int micro = 0; micro < ds.gradient_accumulation_steps; ++micro) {
      // As the trainer: given the backward's scale, the lm_head's backward runs in the forward.
      model.forward(in.data(), tg.data(), o.batch, o.block, 1.0, engine.backward_scale());
      fwd += part.ms();
      part.reset();
      model.backward(engine.backward_scale());
      bwd += part.ms();
      part.reset();
    }
    engine.step();
    double adam = part.ms();
    double ms = total.ms();
    std::printf("%8d %12.1f %12.1f %12.1f %12.1f %12.1f%s\n", s, ms, fwd, bwd, adam, flops / (ms * 1e6),
                s == 0 ? "  (warm-up)" : "");
    if (s > 0) {
      totals.push_back(ms);
      adam_total += adam;
    }
  }
  const double sum_ms = [&] { double t = 0; for (double x : totals) t += x; return t; }();
  std::sort(totals.begin(), totals.end());
  const double median_ms = totals[totals.size() / 2];

  if (o.profile) {  // ms per step of each op, largest first; the rest is the engine's (Adam, copies)
    std::vector<std::pair<std::string, std::pair<double, long>>> rows(timed.totals().begin(), timed.totals().end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double in_ops = 0;
    std::printf("# %-24s %10s %8s %7s\n", "op", "ms/step", "calls", "share");
    for (const auto& [name, t] : rows) {
      in_ops += t.first;
      std::printf("# %-24s %10.2f %8ld %6.1f%%\n", name.c_str(), t.first / o.steps, t.second / o.steps,
                  100 * t.first / sum_ms);
    }
    std::printf("# %-24s %10.2f %8s %6.1f%%\n", "engine step (Adam)", adam_total / o.steps, "",
                100 * adam_total / sum_ms);
    std::printf("# %-24s %10.2f %8s %6.1f%%\n", "other", (sum_ms - in_ops - adam_total) / o.steps, "",
                100 * (sum_ms - in_ops - adam_total) / sum_ms);
  }

  // The model's GEMMs (forward and both backward products), timed in isolation.
  double gemm_seconds = 0, gemm_flops = 0;
  for (const GemmShape& sh : model_gemms(mc, BT)) {
    double t = time_gemm(sh.ta, sh.tb, sh.M, sh.N, sh.K, 5);
    gemm_seconds += t * sh.count;
    gemm_flops += 2.0 * sh.M * sh.N * sh.K * sh.count;
  }
  const double sgemm_rate = gemm_flops / gemm_seconds / 1e9;
  const double achieved = flops / (median_ms * 1e6);
  std::printf("# median step: %.1f ms, %.0f tokens/s\n", median_ms, BT / (median_ms / 1e3));
  std::printf("# achieved: %.1f GFLOP/s; OpenBLAS sgemm on the same shapes: %.1f GFLOP/s; ratio %.2f\n", achieved,
              sgemm_rate, achieved / sgemm_rate);
  const size_t peak = pool_peaks()[Pool::kDevice];
  std::printf("# peak device-pool memory: %.1f MiB\n", double(peak) / (1 << 20));
  std::printf("RESULT step_ms=%.2f achieved_gflops=%.2f sgemm_gflops=%.2f peak_bytes=%zu\n", median_ms, achieved,
              sgemm_rate, peak);
  return 0;
}
