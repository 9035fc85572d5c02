// Every fp32 kernel, at every SIMD level this CPU has, against the fp64 kernels by normalized
// mean squared error (as ggml's test-backend-ops compares backends).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/cpu_features.h"

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

INSTANTIATE_TEST_SUITE_P(Isa, KernelConsistency,
                         ::testing::Values(IsaCase{"avx2", cpu::make_kernels_f32_avx2},
                                           IsaCase{"avx512", cpu::make_kernels_f32_avx512}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zt
