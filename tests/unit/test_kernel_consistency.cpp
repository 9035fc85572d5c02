// Every fp32 kernel, at every SIMD level this CPU has, against the fp64 kernels by normalized
// mean squared error (as ggml's test-backend-ops compares backends).
#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/lse_attention.h"
#include "core/cpu_features.h"

extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));  // DYNAMIC_ARCH builds only

namespace zt {
namespace {

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? err / ref : err;
}

std::vector<double> rnd(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<float> to_f(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

struct IsaCase {
  const char* name;
  std::unique_ptr<KernelOps<float>> (*make)();
};

class KernelConsistency : public ::testing::TestWithParam<IsaCase> {
 protected:
  void SetUp() override {
    if (std::string(GetParam().name) == "avx512" && !cpu_has_avx512()) {
      GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL/DQ: the AVX-512 kernels cannot run here";
    }
    f32 = GetParam().make();
  }
  std::unique_ptr<KernelOps<float>> f32;
  std::unique_ptr<KernelOps<double>> f64 = cpu::make_kernels_f64();
  static constexpr double kTol = 1e-10;
};

TEST_P(KernelConsistency, LayerNormForwardBackward) {
  const int rows = 37, C = 96;
  auto x = rnd(rows * C, 1), w = rnd(C, 2), b = rnd(C, 3), d = rnd(rows * C, 4);
  std::vector<double> o(rows * C), m(rows), r(rows), dx(rows * C, 0), dw(C, 0), db(C, 0);
  f64->layernorm_forward(o.data(), m.data(), r.data(), x.data(), w.data(), b.data(), rows, C, 1e-5);
  f64->layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), m.data(), r.data(), rows, C);
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), df = to_f(d);
  std::vector<float> of(rows * C), mf(rows), rf(rows), dxf(rows * C, 0), dwf(C, 0), dbf(C, 0);
  f32->layernorm_forward(of.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), rows, C, 1e-5);
  f32->layernorm_backward(dxf.data(), dwf.data(), dbf.data(), df.data(), xf.data(), wf.data(), mf.data(), rf.data(), rows, C);
  EXPECT_LT(nmse(of, o), kTol);
  EXPECT_LT(nmse(dxf, dx), kTol);
  EXPECT_LT(nmse(dwf, dw), kTol);
  EXPECT_LT(nmse(dbf, db), kTol);
}

TEST_P(KernelConsistency, AttentionForwardBackward) {
  const int B = 2, T = 33, C = 64, NH = 4;
  auto qkv = rnd(B * T * 3 * C, 5), d = rnd(B * T * C, 6);
  std::vector<double> o(B * T * C), att(B * NH * T * T), dq(qkv.size());
  f64->attention_forward(o.data(), att.data(), qkv.data(), B, T, C, NH);
  f64->attention_backward(dq.data(), d.data(), o.data(), qkv.data(), att.data(), B, T, C, NH);
  auto qf = to_f(qkv), df = to_f(d);
  std::vector<float> of(o.size()), af(att.size()), dqf(dq.size());
  f32->attention_forward(of.data(), af.data(), qf.data(), B, T, C, NH);
  f32->attention_backward(dqf.data(), df.data(), of.data(), qf.data(), af.data(), B, T, C, NH);
  EXPECT_LT(nmse(of, o), kTol);
  EXPECT_LT(nmse(dqf, dq), kTol);
}

TEST_P(KernelConsistency, GeluForwardBackward) {
  const size_t n = 10007;
  auto x = rnd(n, 7, 3.0), d = rnd(n, 8);
  std::vector<double> o(n), dx(n);
  f64->gelu_forward(o.data(), x.data(), n);
  f64->gelu_backward(dx.data(), x.data(), d.data(), n);
  auto xf = to_f(x), df = to_f(d);
  std::vector<float> of(n), dxf(n);
  f32->gelu_forward(of.data(), xf.data(), n);
  f32->gelu_backward(dxf.data(), xf.data(), df.data(), n);
  EXPECT_LT(nmse(of, o), kTol);
  EXPECT_LT(nmse(dxf, dx), kTol);
}

TEST_P(KernelConsistency, SoftmaxCrossEntropy) {
  const int rows = 9, V = 1031;
  auto l = rnd(rows * V, 9, 4.0);
  std::vector<int32_t> t(rows);
  for (int r = 0; r < rows; ++r) t[r] = (r * 97) % V;
  t[3] = -1;
  std::vector<double> losses(rows);
  double total = 0;
  f64->softmax_xent_forward(l.data(), losses.data(), t.data(), rows, V, &total, 1.0);
  f64->softmax_xent_backward(l.data(), t.data(), rows, V, 0.25);
  auto lf = to_f(rnd(rows * V, 9, 4.0));
  std::vector<float> lossf(rows);
  double totalf = 0;
  f32->softmax_xent_forward(lf.data(), lossf.data(), t.data(), rows, V, &totalf, 1.0);
  f32->softmax_xent_backward(lf.data(), t.data(), rows, V, 0.25);
  EXPECT_NEAR(totalf, total, 1e-5 * std::fabs(total));
  EXPECT_LT(nmse(lf, l), kTol);
}

TEST_P(KernelConsistency, MatmulsAndEmbedding) {
  const int rows = 24, in = 40, out = 56, V = 11, T = 6, B = 4;
  auto x = rnd(rows * in, 10), w = rnd(in * out, 11), b = rnd(out, 12), d = rnd(rows * out, 13);
  std::vector<double> o(rows * out), dx(rows * in), dw(in * out, 0), db(out, 0);
  f64->matmul_forward(o.data(), x.data(), w.data(), b.data(), rows, in, out);
  f64->matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), rows, in, out);
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), df = to_f(d);
  std::vector<float> of(o.size()), dxf(dx.size()), dwf(dw.size(), 0), dbf(db.size(), 0);
  f32->matmul_forward(of.data(), xf.data(), wf.data(), bf.data(), rows, in, out);
  f32->matmul_backward(dxf.data(), dwf.data(), dbf.data(), df.data(), xf.data(), wf.data(), rows, in, out);
  EXPECT_LT(nmse(of, o), kTol);
  EXPECT_LT(nmse(dxf, dx), kTol);
  EXPECT_LT(nmse(dwf, dw), kTol);
  EXPECT_LT(nmse(dbf, db), kTol);

  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 7) % V;
  auto wte = rnd(V * in, 14), wpe = rnd(T * in, 15), de = rnd(B * T * in, 16);
  std::vector<double> e(B * T * in), dwte(V * in, 0), dwpe(T * in, 0);
  f64->embedding_forward(e.data(), tok.data(), wte.data(), wpe.data(), B, T, in);
  f64->embedding_backward(dwte.data(), dwpe.data(), de.data(), tok.data(), B, T, in);
  auto wtef = to_f(wte), wpef = to_f(wpe), def = to_f(de);
  std::vector<float> ef(e.size()), dwtef(dwte.size(), 0), dwpef(dwpe.size(), 0);
  f32->embedding_forward(ef.data(), tok.data(), wtef.data(), wpef.data(), B, T, in);
  f32->embedding_backward(dwtef.data(), dwpef.data(), def.data(), tok.data(), B, T, in);
  EXPECT_LT(nmse(ef, e), kTol);
  EXPECT_LT(nmse(dwtef, dwte), kTol);
  EXPECT_LT(nmse(dwpef, dwpe), kTol);
}

// Batch invariance (set_batch_invariant): matmul_forward and linear_forward against fp64, and
// every row of a 200-row product equal, bit for bit, to the same row computed in a product of 1,
// 2, 3, 5, 13, 16, 17 or 100 rows starting at rows 0, 1, 7 or 97 (OpenBLAS 0.3.21 itself rounds
// a row of 13 or more differently from alone). Odd sizes put rows, columns and k in every edge
// block; 200 rows cross the CPU kernel's chunks of 96, and 768 its k blocks of 256.
TEST_P(KernelConsistency, BatchInvariantMatmuls) {
  ASSERT_TRUE(f32->set_batch_invariant(true));
  const int rows = 200;
  for (const auto& [in, out] : std::vector<std::pair<int, int>>{{64, 100}, {37, 19}, {768, 131}}) {
    auto x = rnd(size_t(rows) * in, 20), w = rnd(size_t(in) * out, 21), b = rnd(out, 22);
    const auto xf = to_f(x), wf = to_f(w), bf = to_f(b);
    for (const bool linear : {false, true}) {  // w as [in,out] (Conv1D) or [out,in] (nn.Linear)
      const std::string what = std::string(linear ? "linear" : "matmul") + "_forward " + std::to_string(in) +
                               " -> " + std::to_string(out);
      auto forward = [&](float* o, int first, int n) {
        const float* xs = xf.data() + size_t(first) * in;
        if (linear) f32->linear_forward(o, xs, wf.data(), bf.data(), n, in, out);
        else f32->matmul_forward(o, xs, wf.data(), bf.data(), n, in, out);
      };
      std::vector<double> want(size_t(rows) * out);
      if (linear) f64->linear_forward(want.data(), x.data(), w.data(), b.data(), rows, in, out);
      else f64->matmul_forward(want.data(), x.data(), w.data(), b.data(), rows, in, out);
      std::vector<float> all(want.size());
      forward(all.data(), 0, rows);
      EXPECT_LT(nmse(all, want), kTol) << what;
      for (int n : {1, 2, 3, 5, 13, 16, 17, 100}) {
        for (int first : {0, 1, 7, 97}) {
          std::vector<float> part(size_t(n) * out);
          forward(part.data(), first, n);
          const float* same = all.data() + size_t(first) * out;
          EXPECT_EQ(std::memcmp(part.data(), same, part.size() * sizeof(float)), 0)
              << what << ": rows " << first << ".." << first + n - 1 << " alone differ from the 200-row product's";
        }
      }
    }
  }
  EXPECT_TRUE(f32->set_batch_invariant(false));
}

// The attention that saves each row's logsumexp (the CPU's bf16 table: lse_attention.h) against
// the fp64 kernels, which keep the probabilities: GPT-2's packed qkv, and grouped-query attention
// (4 query heads on 2 kv heads) in training's shape and with a KV cache (7 queries over 19 keys).
// lse must be the log of each row's sum of exponentials: exp(score - lse) sums to 1.
TEST(LseAttention, MatchesTheProbabilities) {
  auto f64 = cpu::make_kernels_f64();
  constexpr double kTol = 1e-10;
  {  // packed: qkv [B, T, 3C], out [B, T, C]
    const int B = 2, T = 33, C = 64, NH = 4, hs = C / NH;
    auto qkv = rnd(B * T * 3 * C, 21), d = rnd(B * T * C, 22);
    std::vector<double> o(B * T * C), att(B * NH * T * T), dq(qkv.size());
    f64->attention_forward(o.data(), att.data(), qkv.data(), B, T, C, NH);
    f64->attention_backward(dq.data(), d.data(), o.data(), qkv.data(), att.data(), B, T, C, NH);
    auto qf = to_f(qkv), df = to_f(d);
    std::vector<float> of(o.size()), lse(B * NH * T), dqf(dq.size(), 7.0f);  // dqkv overwritten
    const cpu::AttentionShape s{B, T, T, NH, NH, hs, 3 * size_t(C), 3 * size_t(C), size_t(C)};
    cpu::lse_attention_forward(s, of.data(), lse.data(), qf.data(), qf.data() + C, qf.data() + 2 * C);
    cpu::lse_attention_backward(s, dqf.data(), dqf.data() + C, dqf.data() + 2 * C, df.data(), of.data(), qf.data(),
                                qf.data() + C, qf.data() + 2 * C, lse.data());
    EXPECT_LT(nmse(of, o), kTol);
    EXPECT_LT(nmse(dqf, dq), kTol);
    for (int b = 0; b < B; ++b) {  // the probabilities from lse are the fp64 kernel's
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; t += 8) {
          const double* q = qkv.data() + (size_t(b) * T + t) * 3 * C + h * hs;
          for (int j = 0; j <= t; ++j) {
            const double* k = qkv.data() + (size_t(b) * T + j) * 3 * C + C + h * hs;
            double score = 0;
            for (int i = 0; i < hs; ++i) score += q[i] * k[i];
            score /= std::sqrt(double(hs));
            EXPECT_NEAR(std::exp(score - lse[(size_t(b) * NH + h) * T + t]),
                        att[((size_t(b) * NH + h) * T + t) * T + j], 1e-5);
          }
        }
      }
    }
  }
  for (const auto& [Tq, Tk] : {std::pair{19, 19}, std::pair{7, 19}}) {  // grouped-query, a cache
    const int B = 2, NH = 4, NKV = 2, hs = 16;
    const size_t nq = size_t(B) * Tq * NH * hs, nkv = size_t(B) * Tk * NKV * hs;
    auto q = rnd(nq, 23), k = rnd(nkv, 24), v = rnd(nkv, 25), d = rnd(nq, 26);
    std::vector<double> o(nq), att(size_t(B) * NH * Tq * Tk), dq(nq), dk(nkv), dv(nkv);
    f64->gqa_attention_forward(o.data(), att.data(), q.data(), k.data(), v.data(), B, Tq, Tk, NH, NKV, hs);
    auto qf = to_f(q), kf = to_f(k), vf = to_f(v), df = to_f(d);
    std::vector<float> of(nq), lse(size_t(B) * NH * Tq);
    const cpu::AttentionShape s{B, Tq, Tk, NH, NKV, hs, size_t(NH) * hs, size_t(NKV) * hs, size_t(NH) * hs};
    cpu::lse_attention_forward(s, of.data(), lse.data(), qf.data(), kf.data(), vf.data());
    EXPECT_LT(nmse(of, o), kTol) << Tq << " queries, " << Tk << " keys";
    if (Tq != Tk) continue;  // the backward is training's
    f64->gqa_attention_backward(dq.data(), dk.data(), dv.data(), d.data(), o.data(), q.data(), k.data(), v.data(),
                                att.data(), B, Tq, NH, NKV, hs);
    std::vector<float> dqf(nq, 7.0f), dkf(nkv, 7.0f), dvf(nkv, 7.0f);
    cpu::lse_attention_backward(s, dqf.data(), dkf.data(), dvf.data(), df.data(), of.data(), qf.data(), kf.data(),
                                vf.data(), lse.data());
    EXPECT_LT(nmse(dqf, dq), kTol);
    EXPECT_LT(nmse(dkf, dk), kTol);
    EXPECT_LT(nmse(dvf, dv), kTol);
  }
}

// Whatever OpenBLAS made of this CPU when it loaded, once the kernel tables exist it runs AVX2 kernels
// or better (openblas_core.h: a CPU newer than the library gets its SSE3 "Prescott" kernels
// otherwise, as Debian 12's 0.3.21 does on an Emerald Rapids Xeon), unless OPENBLAS_CORETYPE chose.
TEST(OpenblasCore, RunsAvx2KernelsOrBetter) {
  auto f32 = cpu::make_kernels_f32_avx2();
  const std::string core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE")) GTEST_SKIP() << "OPENBLAS_CORETYPE chose OpenBLAS's kernels: " << core;
  if (!gotoblas_dynamic_init) GTEST_SKIP() << "an OpenBLAS built for one core (no DYNAMIC_ARCH): " << core;
  const std::vector<std::string> avx2{"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  EXPECT_NE(std::find(avx2.begin(), avx2.end(), core), avx2.end())
      << "OpenBLAS runs its " << core << " kernels (" << openblas_get_config() << "); note: '"
      << cpu::openblas_core_note() << "'";
  if (!cpu::openblas_core_note().empty()) {  // it had to choose again: as the variable would have
    EXPECT_EQ(core, active_cpu_isa() == CpuIsa::kAvx512 ? "SkylakeX" : "Haswell");
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelConsistency,
                         ::testing::Values(IsaCase{"avx2", cpu::make_kernels_f32_avx2},
                                           IsaCase{"avx512", cpu::make_kernels_f32_avx512}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zt
