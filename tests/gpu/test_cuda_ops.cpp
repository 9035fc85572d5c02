// Every KernelOps and OptimizerOps op and cast_async of the CUDA backend against the CPU backend on
// the same random inputs (as ggml's test-backend-ops checks every backend against the CPU), and the
// 16-bit cuBLASLt GEMMs against an fp32 CPU reference. Shapes are small and deliberately not
// multiples of 32 or of the vector widths; pointers offset by one element take the scalar paths.
//
// Errors are measured relative to the largest magnitude of the CPU's array, max|gpu - cpu| /
// max|cpu| ("max-relative"), or for GEMMs as ||gpu - cpu|| / ||cpu||, so one tolerance means the
// same thing for every op whatever the values' scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"
#include "core/error.h"
#include "core/dtype.h"
#include "optim/newton_schulz.h"
#include "../unit/random_test_util.h"
#include "cpu_gpu_twins.h"

namespace zt {
namespace {

// Tolerances. Elementwise ops differ only by expf against the CPU's vexp (about 2 ulp each), so
// 1e-6. fp32 GEMMs (TF32 off) reorder sums of at most ~1000 products: error ~ sqrt(k) eps ~ 4e-6
// at worst for the large one, 1e-5 bounds it. Reductions over rows or channels (layernorm,
// softmax, attention, column sums) reorder sums of up to ~100 terms and go through exp and
// division: 1e-5 max-relative is ~100 ulp of headroom, while any indexing or formula mistake gives
// errors of order 1.
constexpr double kElementwiseTol = 1e-6;
constexpr double kGemmTol = 1e-5;
constexpr double kReductionTol = 1e-5;
constexpr double kHalfGemmTol = 1e-2;

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
    ref = std::max(ref, std::fabs(double(want[i])));
    if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
  }
  return ref > 0 ? err / ref : err;
}

double norm_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
    ref += double(want[i]) * double(want[i]);
  }
  return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err);
}

class CudaOps : public CpuGpuTest {
 public:
  /// Runs the same calls on the GPU and on the CPU.
  void on_both(const std::function<void(Backend&)>& fn) {
    fn(*gpu);
    fn(*cpu);
  }

  void expect_close(const Twin<float>& t, double tol, const char* what, bool normwise = false) {
    const auto got = read(*gpu, t.g), want = read(*cpu, t.c);
    const double err = normwise ? norm_rel_error(got, want) : max_rel_error(got, want);
    EXPECT_LE(err, tol) << what;
  }

  template <typename T>
  void expect_equal_bits(const Twin<T>& t, const char* what) {
    const auto got = read(*gpu, t.g), want = read(*cpu, t.c);
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && mismatches++ == 0) first = i;
    EXPECT_EQ(mismatches, 0u) << what << ": first mismatch at " << first;
  }
};

// ---- KernelOps ----------------------------------------------------------------------------------

constexpr int kB = 2, kT = 37, kC = 48, kNH = 4, kV = 101;

TEST_F(CudaOps, EmbeddingForwardAndBackward) {
  // Tokens from only 20 values, so many rows share a token: the backward's chains are exercised.
  auto tokens = twin(random_tokens(kB * kT, 20, 1));
  auto wte = twin(randn(kV * kC, 2)), wpe = twin(randn(kT * kC, 3));
  auto out = twin(randn(kB * kT * kC, 4)), dout = twin(randn(kB * kT * kC, 5));
  auto dwte = twin(randn(kV * kC, 6)), dwpe = twin(randn(kT * kC, 7));  // accumulated into
  on_both([&](Backend& b) {
    b.ops().embedding_forward(out.on(b), tokens.on(b), wte.on(b), wpe.on(b), kB, kT, kC);
    b.ops().embedding_backward(dwte.on(b), dwpe.on(b), dout.on(b), tokens.on(b), kB, kT, kC);
  });
  expect_close(out, kElementwiseTol, "out");
  // The GPU adds the rows in the CPU's order: any error here is a real difference.
  expect_close(dwte, kElementwiseTol, "dwte");
  expect_close(dwpe, kElementwiseTol, "dwpe");
}

// The Llama family's embedding: no learned positions (wpe and dwpe null); the row is a copy.
TEST_F(CudaOps, EmbeddingWithoutPositions) {
  auto tokens = twin(random_tokens(kB * kT, 20, 8));
  auto wte = twin(randn(kV * kC, 9)), out = twin(randn(kB * kT * kC, 90)), dout = twin(randn(kB * kT * kC, 91));
  auto dwte = twin(randn(kV * kC, 92));
  on_both([&](Backend& b) {
    b.ops().embedding_forward(out.on(b), tokens.on(b), wte.on(b), nullptr, kB, kT, kC);
    b.ops().embedding_backward(dwte.on(b), nullptr, dout.on(b), tokens.on(b), kB, kT, kC);
  });
  expect_equal_bits(out, "out");
  expect_close(dwte, kElementwiseTol, "dwte");
}

TEST_F(CudaOps, LayernormForwardAndBackward) {
  const int rows = kB * kT;
  auto x = twin(randn(rows * kC, 10, 2.0f)), w = twin(randn(kC, 11)), bias = twin(randn(kC, 12));
  auto out = twin(randn(rows * kC, 13)), mean = twin(randn(rows, 14)), rstd = twin(randn(rows, 15));
  auto dout = twin(randn(rows * kC, 16));
  auto dx = twin(randn(rows * kC, 17)), dw = twin(randn(kC, 18)), db = twin(randn(kC, 19));  // all +=
  on_both([&](Backend& b) {
    b.ops().layernorm_forward(out.on(b), mean.on(b), rstd.on(b), x.on(b), w.on(b), bias.on(b), rows, kC, 1e-5);
    b.ops().layernorm_backward(dx.on(b), dw.on(b), db.on(b), dout.on(b), x.on(b), w.on(b), mean.on(b), rstd.on(b),
                               rows, kC);
  });
  expect_close(out, kReductionTol, "out");
  expect_close(mean, kReductionTol, "mean");
  expect_close(rstd, kReductionTol, "rstd");
  expect_close(dx, kReductionTol, "dx");
  expect_close(dw, kReductionTol, "dweight");
  expect_close(db, kReductionTol, "dbias");
}

// matmul_forward with and without a bias, and with a bias one element off 16-byte alignment (the
// path that broadcasts the bias instead of cuBLASLt's epilogue).
TEST_F(CudaOps, MatmulForward) {
  const int rows = kB * kT, in = kC, out_dim = 3 * kC + 5;
  auto x = twin(randn(rows * in, 20)), w = twin(randn(in * out_dim, 21)), bias = twin(randn(out_dim + 1, 22));
  auto with_bias = twin(randn(rows * out_dim, 23)), no_bias = twin(randn(rows * out_dim, 24));
  auto odd_bias = twin(randn(rows * out_dim, 25));
  on_both([&](Backend& b) {
    b.ops().matmul_forward(with_bias.on(b), x.on(b), w.on(b), bias.on(b), rows, in, out_dim);
    b.ops().matmul_forward(no_bias.on(b), x.on(b), w.on(b), nullptr, rows, in, out_dim);
    b.ops().matmul_forward(odd_bias.on(b), x.on(b), w.on(b), bias.on(b) + 1, rows, in, out_dim);
  });
  expect_close(with_bias, kGemmTol, "with bias", true);
  expect_close(no_bias, kGemmTol, "without bias", true);
  expect_close(odd_bias, kGemmTol, "unaligned bias", true);
}

TEST_F(CudaOps, MatmulForwardLarge) {
  const int rows = 300, in = 768, out_dim = 1001;
  auto x = twin(randn(size_t(rows) * in, 26)), w = twin(randn(size_t(in) * out_dim, 27, 0.05f));
  auto bias = twin(randn(out_dim, 28)), out = twin(randn(size_t(rows) * out_dim, 29));
  on_both([&](Backend& b) { b.ops().matmul_forward(out.on(b), x.on(b), w.on(b), bias.on(b), rows, in, out_dim); });
  expect_close(out, kGemmTol, "large matmul", true);
}

TEST_F(CudaOps, MatmulBackward) {
  const int rows = kB * kT, in = kC, out_dim = 3 * kC + 5;
  auto x = twin(randn(rows * in, 30)), w = twin(randn(in * out_dim, 31)), dout = twin(randn(rows * out_dim, 32));
  auto dx = twin(randn(rows * in, 33)), dw = twin(randn(in * out_dim, 34)), db = twin(randn(out_dim, 35));
  auto dw_only = twin(randn(in * out_dim, 36));
  on_both([&](Backend& b) {
    b.ops().matmul_backward(dx.on(b), dw.on(b), db.on(b), dout.on(b), x.on(b), w.on(b), rows, in, out_dim);
    b.ops().matmul_backward(nullptr, dw_only.on(b), nullptr, dout.on(b), x.on(b), w.on(b), rows, in, out_dim);
  });
  expect_close(dx, kGemmTol, "dx", true);
  expect_close(dw, kGemmTol, "dweight", true);
  expect_close(db, kReductionTol, "dbias");
  expect_close(dw_only, kGemmTol, "dweight without dx and dbias", true);
}

// linear_forward ([out,in] weights) with and without a bias, and with a bias one element off
// 16-byte alignment (broadcast instead of cuBLASLt's epilogue).
TEST_F(CudaOps, LinearForward) {
  const int rows = kB * kT, in = kC, out_dim = kV;
  auto x = twin(randn(rows * in, 40)), w = twin(randn(out_dim * in, 41)), bias = twin(randn(out_dim + 1, 42));
  auto with_bias = twin(randn(rows * out_dim, 43)), no_bias = twin(randn(rows * out_dim, 44));
  auto odd_bias = twin(randn(rows * out_dim, 45));
  on_both([&](Backend& b) {
    b.ops().linear_forward(with_bias.on(b), x.on(b), w.on(b), bias.on(b), rows, in, out_dim);
    b.ops().linear_forward(no_bias.on(b), x.on(b), w.on(b), nullptr, rows, in, out_dim);
    b.ops().linear_forward(odd_bias.on(b), x.on(b), w.on(b), bias.on(b) + 1, rows, in, out_dim);
  });
  expect_close(with_bias, kGemmTol, "with bias", true);
  expect_close(no_bias, kGemmTol, "without bias", true);
  expect_close(odd_bias, kGemmTol, "unaligned bias", true);
}

// Batch invariance (set_batch_invariant, the decoder's): the CUDA fixed-order GEMMs against the
// CPU's, and each row of a 40-row product equal, bit for bit, to the same row in a product of
// 1, 3, 5, 13 or 17 rows from row 0, 1 or 7 (cuBLASLt picks its algorithm by the row count).
TEST_F(CudaOps, BatchInvariantMatmuls) {
  const int rows = 40;
  for (Backend* b : {gpu.get(), cpu.get()}) ASSERT_TRUE(b->ops().set_batch_invariant(true));
  for (const auto& [in, out_dim] : std::vector<std::pair<int, int>>{{kC, kV}, {768, 131}}) {
    for (const bool linear : {false, true}) {
      const std::string what = std::string(linear ? "linear" : "matmul") + " " + std::to_string(in);
      auto x = twin(randn(size_t(rows) * in, 46)), w = twin(randn(size_t(in) * out_dim, 47));
      auto bias = twin(randn(out_dim, 48)), all = twin(randn(size_t(rows) * out_dim, 49));
      auto forward = [&](Backend& b, float* o, int first, int n) {
        const float* xs = x.on(b) + size_t(first) * in;
        if (linear) b.ops().linear_forward(o, xs, w.on(b), bias.on(b), n, in, out_dim);
        else b.ops().matmul_forward(o, xs, w.on(b), bias.on(b), n, in, out_dim);
      };
      on_both([&](Backend& b) { forward(b, all.on(b), 0, rows); });
      expect_close(all, kGemmTol, what.c_str(), true);
      const std::vector<float> whole = read(*gpu, all.g);
      for (int n : {1, 3, 5, 13, 17}) {
        for (int first : {0, 1, 7}) {
          DeviceArray<float> part(*gpu, size_t(n) * out_dim);
          forward(*gpu, part.data(), first, n);
          const std::vector<float> got = read(*gpu, part);
          EXPECT_EQ(std::memcmp(got.data(), whole.data() + size_t(first) * out_dim, got.size() * sizeof(float)), 0)
              << what << ": rows " << first << ".." << first + n - 1 << " alone differ from the 40-row product's";
        }
      }
    }
  }
  for (Backend* b : {gpu.get(), cpu.get()}) EXPECT_TRUE(b->ops().set_batch_invariant(false));
}

// dx overwritten and accumulated (the q, k and v projections share their input), dweight and
// dbias accumulated, and the call without dx or dbias.
TEST_F(CudaOps, LinearBackward) {
  const int rows = kB * kT, in = kC, out_dim = kV;
  auto x = twin(randn(rows * in, 46)), w = twin(randn(out_dim * in, 47)), dout = twin(randn(rows * out_dim, 48));
  auto dx = twin(randn(rows * in, 49)), dx_acc = twin(randn(rows * in, 140));
  auto dw = twin(randn(out_dim * in, 141)), db = twin(randn(out_dim, 142)), dw_only = twin(randn(out_dim * in, 143));
  on_both([&](Backend& b) {
    b.ops().linear_backward(dx.on(b), dw.on(b), db.on(b), dout.on(b), x.on(b), w.on(b), rows, in, out_dim, false);
    b.ops().linear_backward(dx_acc.on(b), dw.on(b), nullptr, dout.on(b), x.on(b), w.on(b), rows, in, out_dim, true);
    b.ops().linear_backward(nullptr, dw_only.on(b), nullptr, dout.on(b), x.on(b), w.on(b), rows, in, out_dim, false);
  });
  expect_close(dx, kGemmTol, "dx", true);
  expect_close(dx_acc, kGemmTol, "dx accumulated", true);
  expect_close(dw, kGemmTol, "dweight (accumulated twice)", true);
  expect_close(db, kReductionTol, "dbias");
  expect_close(dw_only, kGemmTol, "dweight without dx and dbias", true);
}

// B, T, C, NH: the small shape (head size 12, under a warp) and GPT-2's head size 64 with a
// longer, non-multiple-of-32 sequence.
void check_attention(CudaOps& t, int B, int T, int C, int NH) {
  const size_t qkv_n = size_t(B) * T * 3 * C, att_n = size_t(B) * NH * T * T;
  auto qkv = t.twin(randn(qkv_n, 50)), dout = t.twin(randn(size_t(B) * T * C, 51));
  auto out = t.twin(randn(size_t(B) * T * C, 52)), att = t.twin(randn(att_n, 53)), dqkv = t.twin(randn(qkv_n, 54));
  t.on_both([&](Backend& b) {
    b.ops().attention_forward(out.on(b), att.on(b), qkv.on(b), B, T, C, NH);
    b.ops().attention_backward(dqkv.on(b), dout.on(b), out.on(b), qkv.on(b), att.on(b), B, T, C, NH);
  });
  const std::string shape = cat(" B", B, " T", T, " C", C, " NH", NH);
  t.expect_close(out, kReductionTol, ("out" + shape).c_str());
  t.expect_close(att, kReductionTol, ("att" + shape).c_str());
  t.expect_close(dqkv, kReductionTol, ("dqkv" + shape).c_str());
  // The masked entries are exact zeros, as the CPU writes them.
  const auto a = t.read(*t.gpu, att.g);
  for (size_t row = 0; row < size_t(B) * NH * T; ++row)
    for (int t2 = int(row % T) + 1; t2 < T; ++t2) ASSERT_EQ(a[row * T + t2], 0.0f) << "row " << row << " t2 " << t2;
}

TEST_F(CudaOps, AttentionForwardAndBackward) {
  check_attention(*this, kB, kT, kC, kNH);
  check_attention(*this, 1, 101, 128, 2);
}

TEST_F(CudaOps, Elementwise) {
  // n is odd, so the vector paths leave a scalar tail; the "+ 1" views are not 16-byte aligned
  // and take the scalar path throughout.
  const size_t n = 4099;
  auto x = twin(randn(n + 1, 60, 3.0f)), y = twin(randn(n + 1, 61)), dout = twin(randn(n + 1, 62));
  auto gelu = twin(randn(n + 1, 63)), dgelu = twin(randn(n + 1, 64)), sum = twin(randn(n + 1, 65));
  auto acc = twin(randn(n + 1, 66));
  for (size_t offset : {size_t(0), size_t(1)}) {
    on_both([&](Backend& b) {
      b.ops().gelu_forward(gelu.on(b) + offset, x.on(b) + offset, n);
      b.ops().gelu_backward(dgelu.on(b) + offset, x.on(b) + offset, dout.on(b) + offset, n);
      b.ops().residual_forward(sum.on(b) + offset, x.on(b) + offset, y.on(b) + offset, n);
      b.ops().accumulate(acc.on(b) + offset, y.on(b) + offset, n);
    });
    expect_close(gelu, kElementwiseTol, "gelu_forward");
    expect_close(dgelu, kElementwiseTol, "gelu_backward");
    expect_equal_bits(sum, "residual_forward");
    expect_equal_bits(acc, "accumulate");
  }
}

// ---- the Llama family -------------------------------------------------------------------------

TEST_F(CudaOps, RmsnormForwardAndBackward) {
  const int rows = kB * kT;
  auto x = twin(randn(rows * kC, 100, 2.0f)), w = twin(randn(kC, 101));
  auto out = twin(randn(rows * kC, 102)), rstd = twin(randn(rows, 103)), dout = twin(randn(rows * kC, 104));
  auto dx = twin(randn(rows * kC, 105)), dw = twin(randn(kC, 106));  // both +=
  on_both([&](Backend& b) {
    b.ops().rmsnorm_forward(out.on(b), rstd.on(b), x.on(b), w.on(b), rows, kC, 1e-6);
    b.ops().rmsnorm_backward(dx.on(b), dw.on(b), dout.on(b), x.on(b), w.on(b), rstd.on(b), rows, kC);
  });
  expect_close(out, kReductionTol, "out");
  expect_close(rstd, kReductionTol, "rstd");
  expect_close(dx, kReductionTol, "dx");
  expect_close(dw, kReductionTol, "dweight");
}

// Forward, then inverse (which must bring x back), on x[B,T,heads,hs].
TEST_F(CudaOps, Rotary) {
  const int heads = 3, hs = 16;
  const size_t n = size_t(kB) * kT * heads * hs;
  const auto [c_host, s_host] = rope_angles(kT, hs);
  const std::vector<float> x_host = randn(n, 110);
  auto cosines = twin(c_host), sines = twin(s_host), x = twin(x_host);
  on_both([&](Backend& b) { b.ops().rotary(x.on(b), cosines.on(b), sines.on(b), kB, kT, heads, hs, false); });
  expect_close(x, kElementwiseTol, "rotated");
  on_both([&](Backend& b) { b.ops().rotary(x.on(b), cosines.on(b), sines.on(b), kB, kT, heads, hs, true); });
  expect_close(x, kElementwiseTol, "rotated back");
  EXPECT_LE(max_rel_error(read(*gpu, x.g), x_host), kElementwiseTol) << "inverse(forward(x)) = x";
}

// B, Tq, Tk, NH, NKV, hs. Backward only where Tq = Tk (training).
void check_gqa_attention(CudaOps& t, int B, int Tq, int Tk, int NH, int NKV, int hs) {
  const size_t q_n = size_t(B) * Tq * NH * hs, kv_n = size_t(B) * Tk * NKV * hs, att_n = size_t(B) * NH * Tq * Tk;
  auto q = t.twin(randn(q_n, 120)), k = t.twin(randn(kv_n, 121)), v = t.twin(randn(kv_n, 122));
  auto out = t.twin(randn(q_n, 123)), att = t.twin(randn(att_n, 124));
  t.on_both([&](Backend& b) {
    b.ops().gqa_attention_forward(out.on(b), att.on(b), q.on(b), k.on(b), v.on(b), B, Tq, Tk, NH, NKV, hs);
  });
  const std::string shape = cat(" B", B, " Tq", Tq, " Tk", Tk, " NH", NH, " NKV", NKV, " hs", hs);
  t.expect_close(out, kReductionTol, ("out" + shape).c_str());
  t.expect_close(att, kReductionTol, ("att" + shape).c_str());
  // Query i sits at position Tk - Tq + i: the keys after it are exact zeros, as the CPU writes them.
  const auto a = t.read(*t.gpu, att.g);
  for (size_t row = 0; row < size_t(B) * NH * Tq; ++row)
    for (int t2 = Tk - Tq + int(row % Tq) + 1; t2 < Tk; ++t2)
      ASSERT_EQ(a[row * Tk + t2], 0.0f) << "row " << row << " t2 " << t2 << shape;
  if (Tq != Tk) return;

  auto dout = t.twin(randn(q_n, 125));
  auto dq = t.twin(randn(q_n, 126)), dk = t.twin(randn(kv_n, 127)), dv = t.twin(randn(kv_n, 128));  // overwritten
  t.on_both([&](Backend& b) {
    b.ops().gqa_attention_backward(dq.on(b), dk.on(b), dv.on(b), dout.on(b), out.on(b), q.on(b), k.on(b), v.on(b),
                                   att.on(b), B, Tq, NH, NKV, hs);
  });
  t.expect_close(dq, kReductionTol, ("dq" + shape).c_str());
  t.expect_close(dk, kReductionTol, ("dk" + shape).c_str());
  t.expect_close(dv, kReductionTol, ("dv" + shape).c_str());
  // No atomics: the same call again gives the same bits.
  const auto dk_first = t.read(*t.gpu, dk.g), dv_first = t.read(*t.gpu, dv.g);
  t.gpu->ops().gqa_attention_backward(dq.g.data(), dk.g.data(), dv.g.data(), dout.g.data(), out.g.data(), q.g.data(),
                                      k.g.data(), v.g.data(), att.g.data(), B, Tq, NH, NKV, hs);
  EXPECT_EQ(std::memcmp(dk_first.data(), t.read(*t.gpu, dk.g).data(), kv_n * sizeof(float)), 0) << "dk" << shape;
  EXPECT_EQ(std::memcmp(dv_first.data(), t.read(*t.gpu, dv.g).data(), kv_n * sizeof(float)), 0) << "dv" << shape;
}

TEST_F(CudaOps, GqaAttentionForwardAndBackward) {
  check_gqa_attention(*this, kB, kT, kT, 4, 2, 12);   // two query heads per kv head, head size under a warp
  check_gqa_attention(*this, 1, 101, 101, 8, 2, 64);  // Llama's head size, a longer odd sequence
  check_gqa_attention(*this, kB, kT, kT, 4, 4, 16);   // NKV = NH: plain multi-head attention
  check_gqa_attention(*this, 1, 45, 45, 6, 1, 24);    // multi-query: one kv head for all
}

TEST_F(CudaOps, GqaAttentionWithKvCache) {
  check_gqa_attention(*this, kB, 5, 40, 4, 2, 16);  // a chunk of 5 new tokens after 35 cached ones
  check_gqa_attention(*this, 3, 1, 33, 8, 2, 64);   // decoding one token
}

TEST_F(CudaOps, Swiglu) {
  // n is odd, so the vector paths leave a scalar tail; the "+ 1" views take the scalar path.
  const size_t n = 4099;
  auto gate = twin(randn(n + 1, 130, 3.0f)), up = twin(randn(n + 1, 131)), dout = twin(randn(n + 1, 132));
  auto out = twin(randn(n + 1, 133)), dgate = twin(randn(n + 1, 134)), dup = twin(randn(n + 1, 135));
  for (size_t offset : {size_t(0), size_t(1)}) {
    on_both([&](Backend& b) {
      b.ops().swiglu_forward(out.on(b) + offset, gate.on(b) + offset, up.on(b) + offset, n);
      b.ops().swiglu_backward(dgate.on(b) + offset, dup.on(b) + offset, dout.on(b) + offset, gate.on(b) + offset,
                              up.on(b) + offset, n);
    });
    expect_close(out, kElementwiseTol, "swiglu_forward");
    expect_close(dgate, kElementwiseTol, "swiglu_backward dgate");
    expect_close(dup, kElementwiseTol, "swiglu_backward dup");
  }
}

TEST_F(CudaOps, SoftmaxCrossEntropy) {
  const int rows = kB * kT;
  // Every fifth target is -1 (ignored: loss 0, gradient 0).
  auto targets = twin(random_tokens(rows, kV, 70, true));
  auto logits = twin(randn(size_t(rows) * kV, 71, 4.0f)), losses = twin(randn(rows, 72));
  std::vector<double> start{0.25};
  auto loss_sum = twin(start);
  on_both([&](Backend& b) {
    b.ops().softmax_xent_forward(logits.on(b), losses.on(b), targets.on(b), rows, kV, loss_sum.on(b), 0.5);
  });
  expect_close(logits, kReductionTol, "probabilities");
  expect_close(losses, kReductionTol, "losses");
  const double got = read(*gpu, loss_sum.g)[0], want = read(*cpu, loss_sum.c)[0];
  EXPECT_NEAR(got, want, kReductionTol * std::fabs(want - start[0])) << "loss_sum";
  on_both([&](Backend& b) { b.ops().softmax_xent_backward(logits.on(b), targets.on(b), rows, kV, 1.0 / 64); });
  // Elementwise from the probabilities compared above: p d - [v = target] d, 0 for ignored rows.
  expect_close(logits, kReductionTol, "dlogits");
}

// ---- OptimizerOps ---------------------------------------------------------------------------------

std::vector<uint16_t> to_dtype_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = t == DType::kBF16 ? to_bf16(v[i]).bits : to_fp16(v[i]).bits;
  return out;
}

// After a fused optimizer step: the parameter the GPU wrote, elements [off, off + n), is its own
// new master weight, bit for bit in fp32, and in 16 bits rounded as the CPU rounds it (comparing
// with the CPU's parameter instead could flip at a rounding tie when the masters differ by an
// ulp). Aliased: the master is the parameter, nothing more to check.
void expect_param_is_master(Backend& gpu, const Twin<float>& master, const Twin<float>& p32,
                            const Twin<uint16_t>& p16, DType param, bool aliased, size_t off, size_t n) {
  const auto w = CpuGpuTest::read(gpu, master.g);
  if (param != DType::kF32) {
    const auto p = CpuGpuTest::read(gpu, p16.g);
    const auto want = to_dtype_bits(w, param);
    for (size_t i = off; i < off + n; ++i) ASSERT_EQ(p[i], want[i]) << "param " << i;
  } else if (!aliased) {
    const auto p = CpuGpuTest::read(gpu, p32.g);
    for (size_t i = off; i < off + n; ++i) ASSERT_EQ(p[i], w[i]) << "param " << i;
  }
}

struct AdamCase {
  DType grad, param;
  bool adamw, aliased, offset;
};

TEST_F(CudaOps, AdamStep) {
  const size_t n = 1003;
  const AdamCase cases[] = {
      {DType::kF32, DType::kF32, true, true, false},  {DType::kF32, DType::kF32, false, false, true},
      {DType::kF32, DType::kBF16, true, false, false}, {DType::kBF16, DType::kBF16, true, false, false},
      {DType::kBF16, DType::kF32, false, false, false}, {DType::kF16, DType::kF16, true, false, true},
      {DType::kBF16, DType::kBF16, false, false, true},
  };
  for (const AdamCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "grad " << dtype_name(c.grad) << " param " << dtype_name(c.param)
                                      << (c.adamw ? " adamw" : " adam") << (c.aliased ? " aliased" : "")
                                      << (c.offset ? " unaligned" : ""));
    const size_t off = c.offset ? 1 : 0;
    auto master = twin(randn(n + 1, 80)), m = twin(randn(n + 1, 81, 0.1f));
    std::vector<float> v_host = randn(n + 1, 82, 0.1f);
    for (auto& x : v_host) x = x * x;  // the second moment is non-negative
    auto v = twin(v_host);
    const std::vector<float> g_host = randn(n + 1, 83, 10.0f);
    auto g32 = twin(g_host);
    auto g16 = twin(c.grad == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, c.grad));
    auto p32 = twin(randn(n + 1, 84));
    auto p16 = twin(std::vector<uint16_t>(n + 1, 0xffff));  // a NaN in either 16-bit type: must be overwritten
    OptimizerStepArgs args;
    args.lr = 1e-3f, args.weight_decay = 0.1f, args.adamw_mode = c.adamw;
    args.bias_correction1 = 1 - std::pow(0.9f, 3.0f), args.bias_correction2 = 1 - std::pow(0.999f, 3.0f);
    args.grad_scale = 0.125f;
    on_both([&](Backend& b) {
      const void* grad = c.grad == DType::kF32 ? static_cast<const void*>(g32.on(b) + off) : g16.on(b) + off;
      void* param = c.param != DType::kF32 ? static_cast<void*>(p16.on(b) + off)
                    : c.aliased            ? static_cast<void*>(master.on(b) + off)
                                           : static_cast<void*>(p32.on(b) + off);
      b.optimizer_ops().adam_step(args, master.on(b) + off, m.on(b) + off, v.on(b) + off, grad, c.grad, param,
                                  c.param, n);
    });
    // Same formula, same roundings but for FMA contraction: a few ulp at most.
    expect_close(master, kElementwiseTol, "master");
    expect_close(m, kElementwiseTol, "exp_avg");
    expect_close(v, kElementwiseTol, "exp_avg_sq");
    expect_param_is_master(*gpu, master, p32, p16, c.param, c.aliased, off, n);
  }
}

// Lion and Adagrad through OptimizerOps::step: the one moment each keeps, every dtype pair.
TEST_F(CudaOps, LionAndAdagradSteps) {
  const size_t n = 1003;
  const AdamCase cases[] = {
      {DType::kF32, DType::kF32, true, true, false}, {DType::kBF16, DType::kBF16, true, false, true},
      {DType::kF16, DType::kF16, true, false, false}, {DType::kBF16, DType::kF32, true, false, false},
  };
  for (UpdateRule rule : {UpdateRule::kLion, UpdateRule::kAdagrad}) {
    for (const AdamCase& c : cases) {
      SCOPED_TRACE(::testing::Message() << (rule == UpdateRule::kLion ? "lion" : "adagrad") << " grad "
                                        << dtype_name(c.grad) << " param " << dtype_name(c.param)
                                        << (c.offset ? " unaligned" : ""));
      const size_t off = c.offset ? 1 : 0;
      std::vector<float> m_host = randn(n + 1, 91, 0.1f), g_host = randn(n + 1, 93, 10.0f);
      if (rule == UpdateRule::kAdagrad) {
        for (auto& x : m_host) x = x * x;  // a sum of squares
      }
      m_host[off + 5] = 0, g_host[off + 5] = 0;  // Lion: sign(0) = 0 on the device too
      const std::vector<float> w0 = randn(n + 1, 90);
      auto master = twin(w0), m = twin(m_host), g32 = twin(g_host);
      auto g16 = twin(c.grad == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, c.grad));
      auto p32 = twin(randn(n + 1, 94));
      auto p16 = twin(std::vector<uint16_t>(n + 1, 0xffff));
      OptimizerStepArgs args;
      args.rule = rule;
      args.lr = 1e-3f, args.weight_decay = 0.1f, args.beta1 = 0.9f, args.beta2 = 0.99f, args.eps = 1e-10f;
      args.grad_scale = 0.125f;
      on_both([&](Backend& b) {
        const void* grad = c.grad == DType::kF32 ? static_cast<const void*>(g32.on(b) + off) : g16.on(b) + off;
        void* param = c.param != DType::kF32 ? static_cast<void*>(p16.on(b) + off)
                      : c.aliased            ? static_cast<void*>(master.on(b) + off)
                                             : static_cast<void*>(p32.on(b) + off);
        float* exp_avg = rule == UpdateRule::kLion ? m.on(b) + off : nullptr;
        float* exp_avg_sq = rule == UpdateRule::kAdagrad ? m.on(b) + off : nullptr;
        b.optimizer_ops().step(args, master.on(b) + off, exp_avg, exp_avg_sq, grad, c.grad, param, c.param, n);
      });
      expect_close(master, kElementwiseTol, "master");
      expect_close(m, kElementwiseTol, "moment");
      const auto w = read(*gpu, master.g);
      if (rule == UpdateRule::kLion) {  // decayed, not stepped: sign(0) = 0
        EXPECT_NEAR(w[off + 5], w0[off + 5] * (1 - 1e-4f), 1e-6) << "the zero-gradient element";
      }
      expect_param_is_master(*gpu, master, p32, p16, c.param, c.aliased, off, n);
    }
  }
}

// Lamb's two passes: the moments and the per-tensor sums, then the update with a trust ratio.
TEST_F(CudaOps, LambPasses) {
  const size_t n = 1003;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> v_host = randn(n, 97, 0.1f);
    for (auto& x : v_host) x = x * x;
    auto master = twin(randn(n, 95)), m = twin(randn(n, 96, 0.1f)), v = twin(v_host);
    const std::vector<float> g_host = randn(n, 98, 10.0f);
    auto g32 = twin(g_host);
    auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
    auto p16 = twin(std::vector<uint16_t>(n, 0xffff));
    auto sums = twin(std::vector<double>{0.5, 0.25});  // the passes add to what is there
    OptimizerStepArgs args;
    args.rule = UpdateRule::kLamb;
    args.lr = 1e-2f, args.weight_decay = 0.1f, args.eps = 1e-6f, args.grad_scale = 0.125f;
    args.bias_correction1 = 1 - std::pow(0.9f, 2.0f), args.bias_correction2 = 1 - std::pow(0.999f, 2.0f);
    on_both([&](Backend& b) {
      const void* grad = dtype == DType::kF32 ? static_cast<const void*>(g32.on(b)) : g16.on(b);
      b.optimizer_ops().lamb_moments(args, master.on(b), m.on(b), v.on(b), grad, dtype, n, sums.on(b));
      void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b)) : p16.on(b);
      b.optimizer_ops().lamb_apply(args, 0.37f, master.on(b), m.on(b), v.on(b), param, dtype, n);
    });
    const auto got = read(*gpu, sums.g), want = read(*cpu, sums.c);
    for (int k = 0; k < 2; ++k) EXPECT_NEAR(got[k], want[k], 1e-6 * std::fabs(want[k])) << "sum " << k;
    expect_close(m, kElementwiseTol, "exp_avg");
    expect_close(v, kElementwiseTol, "exp_avg_sq");
    expect_close(master, kElementwiseTol, "master");
    expect_param_is_master(*gpu, master, master, p16, dtype, dtype == DType::kF32, 0, n);  // fp32: in place
  }
}

// Muon's passes and Newton-Schulz's element-wise steps; then Newton-Schulz itself (its GEMMs on
// cuBLASLt, TF32 off) on a wide, a tall and a square matrix, both methods.
TEST_F(CudaOps, MuonPassesAndNewtonSchulz) {
  const size_t n = 1003;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto master = twin(randn(n, 101)), m = twin(randn(n, 102, 0.1f)), u = twin(std::vector<float>(n, 0.0f));
    const std::vector<float> g_host = randn(n, 103, 10.0f);
    auto g32 = twin(g_host);
    auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
    auto p16 = twin(std::vector<uint16_t>(n, 0xffff));
    OptimizerStepArgs args;
    args.rule = UpdateRule::kMuon;
    args.momentum = 0.9f, args.muon_lr = 0.02f, args.lr = 1e-3f, args.weight_decay = 0.1f, args.grad_scale = 0.125f;
    on_both([&](Backend& b) {
      const void* grad = dtype == DType::kF32 ? static_cast<const void*>(g32.on(b)) : g16.on(b);
      b.optimizer_ops().muon_momentum(args, m.on(b), grad, dtype, u.on(b), n);
      void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b)) : p16.on(b);
      b.optimizer_ops().muon_apply(args, master.on(b), u.on(b), param, dtype, n);
    });
    expect_close(m, kElementwiseTol, "momentum");
    expect_close(u, kElementwiseTol, "update");
    expect_close(master, kElementwiseTol, "master");
    expect_param_is_master(*gpu, master, master, p16, dtype, dtype == DType::kF32, 0, n);
  }
  {  // axpby (aliased and not), add_diagonal, scale_by_inverse_norm reading the norm on the device
    auto y = twin(randn(37 * 37, 104)), x = twin(randn(37 * 37, 105));
    auto norm = twin(std::vector<double>{0.0});
    on_both([&](Backend& b) {
      b.optimizer_ops().axpby(y.on(b), 0.5f, x.on(b), -2.0f, 37 * 37);
      b.optimizer_ops().axpby(y.on(b), 3.0f, y.on(b), 0.0f, 37 * 37);
      b.optimizer_ops().add_diagonal(y.on(b), 37, 1.5f);
      b.optimizer_ops().sum_squares(y.on(b), DType::kF32, 37 * 37, norm.on(b));
      b.optimizer_ops().scale_by_inverse_norm(y.on(b), 37 * 37, norm.on(b), 1e-7f);
    });
    expect_close(y, kReductionTol, "axpby, add_diagonal, scale_by_inverse_norm");
  }
  const std::pair<size_t, size_t> shapes[] = {{24, 70}, {70, 24}, {33, 33}};
  for (auto method : {OptimizerConfig::NsMethod::kGram, OptimizerConfig::NsMethod::kStandard}) {
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(::testing::Message() << (method == OptimizerConfig::NsMethod::kGram ? "gram " : "standard ")
                                        << rows << " x " << cols);
      auto x = twin(randn(rows * cols, 106));
      on_both([&](Backend& b) {
        NewtonSchulz ns(b, method, 5, rows * cols, std::min(rows, cols));
        ns.orthogonalize(x.on(b), rows, cols);
        b.synchronize();
      });
      // Five iterations of degree-5 polynomials amplify the GEMMs' reordering: 1e-4 of the largest.
      expect_close(x, 1e-4, "orthogonalised");
    }
  }
}

// Adafactor's three passes on a 37 x 53 matrix cut inside a row (the partition's and offload's
// pieces) and on a 1-D tensor, with a first moment, fp32 and bf16: the GPU's float atomics move
// the sums by a rounding, so the sums and everything after them at the reductions' tolerance.
TEST_F(CudaOps, AdafactorPasses) {
  const size_t rows = 37, cols = 53, n = rows * cols, vec = 301;
  const std::pair<size_t, size_t> pieces[] = {{0, 100}, {100, n}};
  for (bool torch_rule : {false, true}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << (torch_rule ? " torch" : " transformers"));
      const std::vector<float> g_host = randn(n + vec, 111, 1e-2f);
      auto g32 = twin(g_host);
      auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
      auto p16 = twin(std::vector<uint16_t>(n + vec, 0xffff));
      auto master = twin(randn(n + vec, 112, 0.02f)), m = twin(randn(n + vec, 113, 1e-3f));
      std::vector<float> state_host = randn(rows + cols + vec, 114, 1e-4f);
      for (float& x : state_host) x = x * x;
      auto state = twin(state_host);  // row, col, then the vector's exp_avg_sq
      auto sums = twin(std::vector<float>(rows + cols, 0.0f)), scaled = twin(std::vector<float>(rows, 0.0f));
      auto norms = twin(std::vector<double>{0.5, 0.25, 0, 0});  // the passes add to what is there
      OptimizerStepArgs args;
      args.rule = UpdateRule::kAdafactor;
      args.beta1 = 0.9f, args.beta2 = 0.42f, args.grad_scale = 0.5f;
      args.eps = torch_rule ? 0.0f : 1e-30f;
      args.eps_floor = torch_rule ? 1.1920929e-07f : 0.0f;
      on_both([&](Backend& b) {
        OptimizerOps& ops = b.optimizer_ops();
        const auto grad = [&](size_t at) {
          return dtype == DType::kF32 ? static_cast<const void*>(g32.on(b) + at)
                                      : static_cast<const void*>(g16.on(b) + at);
        };
        float* row = state.on(b);
        float* col = row + rows;
        for (const auto& [lo, hi] : pieces) {
          ops.adafactor_sums(args, grad(lo), dtype, hi - lo, lo, cols, sums.on(b), sums.on(b) + rows);
        }
        ops.adafactor_factors(args, row, col, sums.on(b), sums.on(b) + rows, rows, cols, scaled.on(b));
        AdafactorMoment matrix, vector;
        matrix.scaled_row = scaled.on(b), matrix.col = col, matrix.cols = cols;
        vector.exp_avg_sq = col + cols;
        ops.adafactor_norms(args, master.on(b), matrix, grad(0), dtype, n, norms.on(b));
        ops.adafactor_norms(args, master.on(b) + n, vector, grad(n), dtype, vec, norms.on(b) + 2);
        for (const auto& [lo, hi] : pieces) {
          AdafactorMoment piece = matrix;
          piece.first = lo;
          void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b) + lo) : p16.on(b) + lo;
          ops.adafactor_apply(args, 0.03f, 1e-3f, master.on(b) + lo, m.on(b) + lo, piece, grad(lo), dtype, param, dtype,
                              hi - lo);
        }
        void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b) + n) : p16.on(b) + n;
        ops.adafactor_apply(args, 0.5f, 0.0f, master.on(b) + n, nullptr, vector, grad(n), dtype, param, dtype, vec);
      });
      expect_close(sums, kReductionTol, "row and column sums");
      expect_close(state, kReductionTol, "factors and exp_avg_sq");
      expect_close(scaled, kReductionTol, "scaled rows");
      const auto got = read(*gpu, norms.g), want = read(*cpu, norms.c);
      for (int k = 0; k < 4; ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * std::fabs(want[k])) << "norm sum " << k;
      expect_close(m, kReductionTol, "exp_avg");
      expect_close(master, kReductionTol, "master");
      expect_param_is_master(*gpu, master, master, p16, dtype, dtype == DType::kF32, 0, n + vec);
    }
  }
}

// 1-bit Adam's passes on a 1000-element tensor padded to 1024 over 4 ranks (chunks of 256 bits,
// 8 words, at word 3 of blocks 13 words apart), fp32 and bf16 gradients and parameters: the
// momentum, the worker's compression, the server's sums over 4 ranks' signs and its compression,
// and the decompressed step with some variances 0 (masked). The signs and everything element-wise
// are the CPU's bits; the sums are atomics, and the scales and errors after them within a rounding.
TEST_F(CudaOps, OneBitPasses) {
  const size_t n = 1000, padded = 1024, ranks = 4, chunk = padded / ranks;
  const size_t block_words = 13, word0 = 3;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> g_host = randn(n, 121, 1e-2f);
    auto g32 = twin(g_host);
    auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
    auto p16 = twin(std::vector<uint16_t>(n, 0xffff));
    auto master = twin(randn(n, 122, 0.02f)), m = twin(randn(n, 123, 1e-3f));
    auto worker_error = twin(randn(padded, 124, 1e-4f)), server_error = twin(randn(chunk, 125, 1e-4f));
    std::vector<float> v_host = randn(n, 126, 1e-3f);
    for (size_t i = 0; i < n; ++i) v_host[i] = i % 97 == 5 ? 0.0f : v_host[i] * v_host[i];
    auto v = twin(v_host);
    auto signs = twin(std::vector<uint32_t>(ranks * block_words, 0xdeadbeef));  // the words around stay
    auto server_signs = twin(std::vector<uint32_t>(block_words, 0xdeadbeef));
    std::vector<float> scales_host = randn(ranks, 127, 1.0f);
    for (float& s : scales_host) s = std::fabs(s) + 0.1f;
    auto scales = twin(scales_host);  // every rank's worker scale (this rank's is overwritten, slot 2)
    auto server_scale = twin(std::vector<float>(1, 0.0f));
    auto sums = twin(std::vector<double>{0.25, 0.0});  // the passes add to what is there
    OptimizerStepArgs args;
    args.rule = UpdateRule::kOneBitAdam;
    args.beta1 = 0.9f, args.grad_scale = 0.5f, args.lr = 1e-3f, args.eps = 1e-8f, args.weight_decay = 0.1f;
    on_both([&](Backend& b) {
      OptimizerOps& ops = b.optimizer_ops();
      const void* grad = dtype == DType::kF32 ? static_cast<const void*>(g32.on(b)) : g16.on(b);
      ops.onebit_momentum_sums(args, m.on(b), grad, dtype, n, worker_error.on(b), padded, sums.on(b));
      ops.onebit_compress(m.on(b), n, worker_error.on(b), padded, sums.on(b),
                          SignBlocks{signs.on(b), block_words, word0, scales.on(b) + 2, 0, chunk, ranks});
      const SignBlocks all{signs.on(b), block_words, word0, scales.on(b), 1, chunk, ranks};
      ops.onebit_server_sums(all, server_error.on(b), sums.on(b) + 1);
      ops.onebit_compress(nullptr, 0, server_error.on(b), chunk, sums.on(b) + 1,
                          SignBlocks{server_signs.on(b), block_words, word0, server_scale.on(b), 0, chunk, 1});
      void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b)) : p16.on(b);
      ops.onebit_apply(args, master.on(b), m.on(b), v.on(b), all, param, dtype, n);
    });
    const auto got = read(*gpu, sums.g), want = read(*cpu, sums.c);
    for (int k = 0; k < 2; ++k) EXPECT_NEAR(got[k], want[k], 1e-12 * std::fabs(want[k])) << "sum " << k;
    expect_equal_bits(signs, "the worker's signs (and the words around them)");
    expect_equal_bits(server_signs, "the server's signs");
    expect_close(scales, kReductionTol, "scales");
    expect_close(server_scale, kReductionTol, "the server's scale");
    expect_close(worker_error, kReductionTol, "the worker's error");
    expect_close(server_error, kReductionTol, "the server's error");
    expect_close(m, kReductionTol, "exp_avg, decompressed");
    expect_close(master, kReductionTol, "master");
    expect_param_is_master(*gpu, master, master, p16, dtype, dtype == DType::kF32, 0, n);
    const auto mg = read(*gpu, m.g);
    for (size_t i = 5; i < n; i += 97) EXPECT_EQ(mg[i], 0.0f) << "element " << i << ": variance 0, momentum masked";
  }
}

// 0/1 Adam's passes one after another on a 1000-element tensor with some variances 0 (masked),
// fp32 and bf16 gradients and parameters: the momentum from the all-reduced gradient (from the
// signs of OneBitPasses' layout, and on one rank from the gradient), two local steps (the first
// starting the accumulator afresh), the meeting's preparation and the meeting from signs, and
// the one-rank meeting. Element-wise: the CPU's values within a rounding.
TEST_F(CudaOps, ZeroOnePasses) {
  const size_t n = 1000, ranks = 4, chunk = 256, block_words = 13, word0 = 3;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> g_host = randn(n, 131, 1e-2f);
    auto g32 = twin(g_host);
    auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
    auto p16 = twin(std::vector<uint16_t>(n, 0xffff));
    std::vector<float> m_host = randn(n, 133, 1e-3f), v_host = randn(n, 134, 1e-3f);
    for (size_t i = 0; i < n; ++i) v_host[i] = i % 97 == 5 ? 0.0f : v_host[i] * v_host[i];
    for (size_t i = 5; i < n; i += 97) m_host[i] = 0.0f;  // a masked element's momentum is 0 already
    auto master = twin(randn(n, 132, 0.02f)), m = twin(m_host), v = twin(v_host);
    auto u = twin(std::vector<float>(n, std::nanf("")));  // a fresh local step never reads it
    std::vector<uint32_t> words_host(ranks * block_words);
    for (size_t k = 0; k < words_host.size(); ++k) words_host[k] = uint32_t(0x9e3779b9u * (k + 1));
    auto words = twin(words_host);
    std::vector<float> scales_host = randn(ranks, 135, 1e-3f);
    for (float& s : scales_host) s = std::fabs(s) + 1e-4f;
    auto scales = twin(scales_host);
    OptimizerStepArgs args;
    args.rule = UpdateRule::kZeroOneAdam;
    args.beta1 = 0.9f, args.grad_scale = 0.5f, args.lr = 1e-3f, args.eps = 1e-8f, args.weight_decay = 0.1f;
    on_both([&](Backend& b) {
      OptimizerOps& ops = b.optimizer_ops();
      const void* grad = dtype == DType::kF32 ? static_cast<const void*>(g32.on(b)) : g16.on(b);
      void* param = dtype == DType::kF32 ? static_cast<void*>(master.on(b)) : p16.on(b);
      const SignBlocks all{words.on(b), block_words, word0, scales.on(b), 1, chunk, ranks};
      const auto pass = [&](ZeroOneArgs z, const SignBlocks& in) {
        ops.zero_one_pass(z, args, master.on(b), m.on(b), v.on(b), u.on(b), grad, dtype, in, param, dtype, n);
      };
      pass({ZeroOnePass::kCompressedGrad}, all);
      pass({ZeroOnePass::kCompressedGrad}, SignBlocks{});
      pass({ZeroOnePass::kLocal, 0.0f, true}, SignBlocks{});
      pass({ZeroOnePass::kLocal, 0.0f, false}, SignBlocks{});
      pass({ZeroOnePass::kSyncPrepare}, SignBlocks{});
      pass({ZeroOnePass::kSync, 2e-3f}, all);
      pass({ZeroOnePass::kLocal, 0.0f, true}, SignBlocks{});
      pass({ZeroOnePass::kSync, 1e-3f}, SignBlocks{});
    });
    expect_close(m, kReductionTol, "exp_avg");
    expect_close(master, kReductionTol, "master");
    expect_close(u, kReductionTol, "the accumulator");
    expect_param_is_master(*gpu, master, master, p16, dtype, dtype == DType::kF32, 0, n);
    const auto mg = read(*gpu, m.g), ug = read(*gpu, u.g);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(ug[i], 0.0f) << "element " << i << ": the meeting empties the accumulator";
    for (size_t i = 5; i < n; i += 97) EXPECT_EQ(mg[i], 0.0f) << "element " << i << ": variance 0, momentum masked";
  }
}

// 1-bit Lamb's passes past its warm-up: the scaled momentum into the packed buffer, the
// decompression of every chunk's signs over it, and the stats pass (exp_avg, exp_avg_sq_fresh,
// the two norms and the largest ratio), the GPU against the CPU.
TEST_F(CudaOps, OneBitLambPasses) {
  const size_t n = 1000, ranks = 4, chunk = 256, block_words = 13, word0 = 3;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> g_host = randn(n, 141, 1e-2f);
    auto g32 = twin(g_host);
    auto g16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(g_host, dtype));
    std::vector<float> v_host = randn(n, 144, 1e-3f), f_host = randn(n, 145, 1e-3f);
    for (size_t i = 0; i < n; ++i) {
      v_host[i] = i % 97 == 5 ? 0.0f : v_host[i] * v_host[i];
      f_host[i] = f_host[i] * f_host[i];
    }
    auto master = twin(randn(n, 142, 0.02f)), m = twin(randn(n, 143, 1e-3f)), v = twin(v_host), f = twin(f_host);
    auto x = twin(std::vector<float>(n, 0.0f));
    std::vector<uint32_t> words_host(ranks * block_words);
    for (size_t k = 0; k < words_host.size(); ++k) words_host[k] = uint32_t(0x9e3779b9u * (k + 7));
    auto words = twin(words_host);
    std::vector<float> scales_host = randn(ranks, 146, 1e-3f);
    for (float& s : scales_host) s = std::fabs(s) + 1e-4f;
    auto scales = twin(scales_host);
    auto sums = twin(std::vector<double>(6, 0.0));
    OptimizerStepArgs args;
    args.rule = UpdateRule::kOneBitLamb;
    args.beta1 = 0.9f, args.beta2 = 0.999f, args.grad_scale = 0.5f, args.eps = 1e-8f, args.weight_decay = 0.1f;
    on_both([&](Backend& b) {
      OptimizerOps& ops = b.optimizer_ops();
      const void* grad = dtype == DType::kF32 ? static_cast<const void*>(g32.on(b)) : g16.on(b);
      ops.onebit_lamb_momentum(args, 1.7f, m.on(b), grad, dtype, x.on(b), n);
    });
    expect_close(x, kReductionTol, "the scaled momentum");
    on_both([&](Backend& b) {
      OptimizerOps& ops = b.optimizer_ops();
      // Once from the momentum as it is (one rank), once from the signs.
      ops.onebit_lamb_stats(args, 1.7f, master.on(b), m.on(b), v.on(b), f.on(b), x.on(b), n, sums.on(b));
      ops.onebit_decompress(SignBlocks{words.on(b), block_words, word0, scales.on(b), 1, chunk, ranks}, x.on(b), n);
      ops.onebit_lamb_stats(args, 1.7f, master.on(b), m.on(b), v.on(b), f.on(b), x.on(b), n, sums.on(b) + 3);
    });
    expect_close(x, 0.0, "the decompressed signs");
    expect_close(m, kReductionTol, "exp_avg");
    expect_close(f, kReductionTol, "exp_avg_sq_fresh");
    const auto sg = read(*gpu, sums.g), sc = read(*cpu, sums.c);
    for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(sg[k], sc[k], 1e-5 * std::fabs(sc[k])) << "sum " << k;
    EXPECT_GT(sc[2], 0.0);
    const auto mg = read(*gpu, m.g);
    for (size_t i = 5; i < n; i += 97) EXPECT_EQ(mg[i], 0.0f) << "element " << i << ": variance 0, momentum masked";
  }
}

// ZeRO++'s quantization (qwZ's int8, qgZ's packed int4): the GPU's q, scales and dequantized
// values equal the CPU's bit for bit (the same float operations: h / absmax, x s rounded half to
// even, q times 1 / s), over a short (odd) last block and a block of zeros, in every dtype.
TEST_F(CudaOps, QuantizeEqualsTheCpu) {
  for (int bits : {8, 4}) {
    const size_t block = bits == 8 ? 2048 : 512, n = 3 * block + 301, blocks = (n + block - 1) / block;
    std::vector<float> x_host = randn(n, 161, 0.05f);
    for (size_t i = block; i < 2 * block; ++i) x_host[i] = 0.0f;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(cat(bits, " bits, ", dtype_name(dtype)));
      auto x32 = twin(x_host);
      auto x16 = twin(dtype == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(x_host, dtype));
      auto q = twin(std::vector<uint8_t>(n, 0));
      auto scales = twin(std::vector<float>(blocks, 0.0f));
      auto back32 = twin(std::vector<float>(n, 0.0f));
      auto back16 = twin(std::vector<uint16_t>(n, 0));
      on_both([&](Backend& b) {
        OptimizerOps& ops = b.optimizer_ops();
        const bool f32 = dtype == DType::kF32;
        ops.quantize(f32 ? static_cast<const void*>(x32.on(b)) : x16.on(b), dtype, n, block, bits, q.on(b),
                     scales.on(b));
        ops.dequantize(q.on(b), scales.on(b), n, block, bits, f32 ? static_cast<void*>(back32.on(b)) : back16.on(b),
                       dtype);
      });
      expect_equal_bits(q, "q");
      expect_equal_bits(scales, "scales");
      if (dtype == DType::kF32) {
        expect_equal_bits(back32, "dequantized");
      } else {
        expect_equal_bits(back16, "dequantized");
      }
    }
  }
}

TEST_F(CudaOps, SumSquares) {
  const size_t n = 5001;
  const std::vector<float> host = randn(n, 90, 3.0f);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    auto data32 = twin(host);
    auto data16 = twin(t == DType::kF32 ? std::vector<uint16_t>(1) : to_dtype_bits(host, t));
    auto out = twin(std::vector<double>{1.5});
    on_both([&](Backend& b) {
      const void* d = t == DType::kF32 ? static_cast<const void*>(data32.on(b)) : data16.on(b);
      b.optimizer_ops().sum_squares(d, t, n, out.on(b));
    });
    // The CPU sums fp32 partials of 4096 squares (then double), the GPU sums in double: the CPU's
    // own rounding is ~sqrt(4096) eps ~ 4e-6 relative, so 1e-5.
    const double got = read(*gpu, out.g)[0], want = read(*cpu, out.c)[0];
    EXPECT_NEAR(got, want, 1e-5 * want);
  }
  // A NaN or an infinity anywhere makes the sum non-finite.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> with_bad = host;
    with_bad[n / 2] = bad;
    auto data = twin(with_bad);
    auto out = twin(std::vector<double>{0.0});
    on_both([&](Backend& b) { b.optimizer_ops().sum_squares(data.on(b), DType::kF32, n, out.on(b)); });
    EXPECT_FALSE(std::isfinite(read(*gpu, out.g)[0]));
    EXPECT_EQ(std::isnan(read(*gpu, out.g)[0]), std::isnan(read(*cpu, out.c)[0]));
  }
}

/// Bytes of `n` values of dtype t, from fp32 values rounded as the CPU rounds them.
std::vector<uint8_t> bytes_of(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  if (t == DType::kF32) std::memcpy(out.data(), v.data(), out.size());
  else {
    const auto bits = to_dtype_bits(v, t);
    std::memcpy(out.data(), bits.data(), out.size());
  }
  return out;
}

TEST_F(CudaOps, AccumulateIntoAndZero) {
  const size_t n = 2051;
  const DType types[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (DType acc_t : types) {
    for (DType x_t : types) {
      SCOPED_TRACE(::testing::Message() << dtype_name(acc_t) << " += " << dtype_name(x_t));
      auto acc = twin(bytes_of(randn(n, 100), acc_t)), x = twin(bytes_of(randn(n, 101), x_t));
      on_both([&](Backend& b) { b.optimizer_ops().accumulate_into(acc.on(b), acc_t, x.on(b), x_t, n); });
      // One fp32 addition and one round to nearest even on either side: equal bit for bit.
      expect_equal_bits(acc, "accumulate_into");
    }
  }
  for (DType t : types) {
    auto data = twin(bytes_of(randn(n, 102), t));
    gpu->optimizer_ops().zero(data.g.data(), t, n - 1);  // the last element stays
    const auto got = read(*gpu, data.g), before = read(*cpu, data.c);
    for (size_t i = 0; i + dtype_size(t) < got.size(); ++i) ASSERT_EQ(got[i], 0) << dtype_name(t) << " byte " << i;
    for (size_t i = got.size() - dtype_size(t); i < got.size(); ++i) EXPECT_EQ(got[i], before[i]);
  }
}

// ---- casts ------------------------------------------------------------------------------------------

TEST_F(CudaOps, CastEveryPairBitExact) {
  // Random values over a wide range plus the edge cases: signed zeros, infinities, a quiet NaN
  // with a payload, fp16 and bf16 subnormals, fp16 overflow and values half-way between 16-bit neighbours.
  std::vector<float> host = randn(3001, 110, 1.0f);
  std::mt19937 rng(111);
  for (size_t i = 0; i < host.size(); i += 3) host[i] *= std::ldexp(1.0f, int(rng() % 60) - 30);
  const float extra[] = {0.0f, -0.0f, INFINITY, -INFINITY, bits_float(0x7fc12345u), bits_float(0xffd00000u),
                         1e-6f, -3e-8f, 1e-40f, 70000.0f, -65520.0f, 65504.0f, 1.0f + 1.0f / 256, 1.0f + 1.0f / 2048,
                         bits_float(0x3f808000u), bits_float(0x3f818000u)};
  host.insert(host.end(), std::begin(extra), std::end(extra));
  const size_t n = host.size();
  const DType types[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (DType from : types) {
    for (DType to : types) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to));
      auto src = twin(bytes_of(host, from));
      auto dst = twin(std::vector<uint8_t>(n * dtype_size(to), 0xab));
      gpu->cast_async(src.g.data(), from, dst.g.data(), to, n, gpu->compute_stream());
      if (from == DType::kF32 || to == DType::kF32 || from == to) {
        cpu->cast_async(src.c.data(), from, dst.c.data(), to, n, cpu->compute_stream());
      } else {
        // The CPU converts between two 16-bit types only through fp32: do that, as the GPU does.
        DeviceArray<float> mid(*cpu, n);
        cpu->cast_async(src.c.data(), from, mid.data(), DType::kF32, n, cpu->compute_stream());
        cpu->cast_async(mid.data(), DType::kF32, dst.c.data(), to, n, cpu->compute_stream());
      }
      expect_equal_bits(dst, "cast");
    }
  }
  // The same pointer with the same dtype is nothing at all; an unaligned view takes the scalar path.
  auto same = twin(bytes_of(host, DType::kF32));
  gpu->cast_async(same.g.data(), DType::kF32, same.g.data(), DType::kF32, n, gpu->compute_stream());
  expect_equal_bits(same, "same pointer, same dtype");
  auto src = twin(bytes_of(host, DType::kF32));
  auto dst = twin(std::vector<uint8_t>(n * 2, 0));
  gpu->cast_async(src.g.data() + 4, DType::kF32, dst.g.data() + 2, DType::kBF16, n - 1, gpu->compute_stream());
  cpu->cast_async(src.c.data() + 4, DType::kF32, dst.c.data() + 2, DType::kBF16, n - 1, cpu->compute_stream());
  expect_equal_bits(dst, "unaligned fp32 -> bf16");
}

// ---- 16-bit cuBLASLt GEMMs against an fp32 reference ----------------------------------------------

struct HalfGemmCase {
  DType ab, d;
  bool trans_a, trans_b, bias, accumulate;
};

TEST_F(CudaOps, HalfPrecisionGemm) {
  const int m = 77, n = 101, k = 96;
  const HalfGemmCase cases[] = {
      {DType::kBF16, DType::kBF16, false, false, false, false}, {DType::kBF16, DType::kF32, false, true, true, false},
      {DType::kBF16, DType::kF32, true, false, false, true},    {DType::kF16, DType::kF16, false, false, true, false},
      {DType::kF16, DType::kF32, false, true, false, true},     {DType::kF16, DType::kF16, true, false, false, false},
  };
  for (const HalfGemmCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.ab) << " -> " << dtype_name(c.d) << " ta " << c.trans_a
                                      << " tb " << c.trans_b << " bias " << c.bias << " acc " << c.accumulate);
    // Inputs rounded to the 16-bit type first, so the fp32 reference multiplies the same numbers.
    auto round_trip = [&](std::vector<float> v, DType t) {
      for (auto& x : v) x = t == DType::kBF16 ? to_float(to_bf16(x)) : to_float(to_fp16(x));
      return v;
    };
    const auto a = round_trip(randn(size_t(m) * k, 120), c.ab), b = round_trip(randn(size_t(k) * n, 121), c.ab);
    const auto bias = round_trip(randn(n, 122), c.d == DType::kF32 ? c.ab : c.d);
    const auto d0 = round_trip(randn(size_t(m) * n, 123), c.d == DType::kF32 ? c.ab : c.d);

    // The reference: the CPU's fp32 matmul_forward on op(A) and op(B) laid out row-major.
    std::vector<float> a_rm = a, b_rm = b;  // row-major op(A) [m,k] and op(B) [k,n]
    if (c.trans_a)  // the stored A is [k,m]: read it as op(A)^T
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < k; ++j) a_rm[size_t(i) * k + j] = a[size_t(j) * m + i];
    if (c.trans_b)  // the stored B is [n,k]
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < n; ++j) b_rm[size_t(i) * n + j] = b[size_t(j) * k + i];
    DeviceArray<float> op_a(*cpu, a_rm.size()), op_b(*cpu, b_rm.size()), ref_bias(*cpu, n), prod(*cpu, size_t(m) * n);
    cpu->copy_from_host(op_a.data(), a_rm.data(), op_a.bytes());
    cpu->copy_from_host(op_b.data(), b_rm.data(), op_b.bytes());
    cpu->copy_from_host(ref_bias.data(), bias.data(), ref_bias.bytes());
    cpu->ops().matmul_forward(prod.data(), op_a.data(), op_b.data(), c.bias ? ref_bias.data() : nullptr, m, k, n);
    std::vector<float> want = read(*cpu, prod);
    if (c.accumulate)
      for (size_t i = 0; i < want.size(); ++i) want[i] += d0[i];

    auto a16 = twin(bytes_of(a, c.ab)), b16 = twin(bytes_of(b, c.ab));
    auto d_dev = twin(bytes_of(d0, c.d)), bias_dev = twin(bytes_of(bias, c.d));
    cuda::GemmArgs args;
    args.trans_a = c.trans_a, args.trans_b = c.trans_b, args.m = m, args.n = n, args.k = k;
    args.a = a16.g.data(), args.b = b16.g.data(), args.d = d_dev.g.data();
    args.ab_dtype = c.ab, args.d_dtype = c.d;
    args.bias = c.bias ? bias_dev.g.data() : nullptr;
    args.accumulate = c.accumulate;
    cuda::gemm(cuda::backend_context(*gpu), args);
    const auto raw = read(*gpu, d_dev.g);
    std::vector<float> got(size_t(m) * n);
    for (size_t i = 0; i < got.size(); ++i) {
      if (c.d == DType::kF32) std::memcpy(&got[i], raw.data() + 4 * i, 4);
      else {
        uint16_t bits;
        std::memcpy(&bits, raw.data() + 2 * i, 2);
        got[i] = c.d == DType::kBF16 ? to_float(bf16{bits}) : to_float(fp16{bits});
      }
    }
    EXPECT_LE(norm_rel_error(got, want), kHalfGemmTol);
  }
}

}  // namespace
}  // namespace zt
