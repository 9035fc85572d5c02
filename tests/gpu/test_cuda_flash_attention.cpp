// Flash attention of the CUDA bf16 table (cuda_flash_attention.cu, dispatched from
// cuda_attention_bf16.cu) against fp32 references on the same bf16 inputs: out, dq, dk, dv
// against the CPU backend's bf16 table (fp32 arithmetic, outputs rounded to bf16 once, its own
// lse saved: backend/cpu/lse_attention.h), and lse against a float64 logsumexp computed here.
// GPT-2's packed qkv and grouped-query attention (NH 8, NKV 2), head sizes 64 and 128, T from 1
// (one key) through 1024 (sixteen 64-row tiles, odd tails between), a KV-cache forward, the
// widened-fp32 fallback (other head sizes, unaligned pointers) in the same
// lse contract, and bit-for-bit repeatability of the backward (no atomics). Each case first asserts
// which path the dispatch takes (flash_attention_supported on the pointers it passes): the
// fallback is exact too, so a flash case that fell back would pass its comparisons unnoticed.
//
// Errors are max-relative, max|gpu - ref| / max|ref| (the denominator at least 1e-3, for the
// exact zeros of dq and dk at T = 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_flash_attention.h"
#include "backend/device_array.h"
#include "core/dtype.h"
#include "core/error.h"
#include "../unit/random_test_util.h"
#include "cpu_gpu_twins.h"

namespace zt {
namespace {

// Tolerances. Each bf16 output is one rounding (2^-8 relative) from an fp32 value; flash attention
// also rounds the probabilities (and dS) to bf16 as operands of the P V, dS K, P^T dO and dS^T Q
// products, relative errors ~2^-9 each that average out over the keys: well under 2e-2, while a
// wrong index, mask or tile gives errors of order 1. lse is fp32 from fp32 sums of bf16 products
// (tensor-core accumulation order): ~1e-6 relative, and 1e-3 absolute leaves room for exp2/log2.
constexpr double kBf16Tol = 2e-2;
constexpr double kLseTol = 1e-3;
constexpr double kRefFloor = 1e-3;

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  const std::vector<float> v = randn(n, seed);
  std::vector<bf16> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(v[i]);
  return out;
}

std::vector<float> widen(const std::vector<bf16>& v, size_t off = 0) {
  std::vector<float> out(v.size() - off);
  for (size_t i = off; i < v.size(); ++i) out[i - off] = to_float(v[i]);
  return out;
}

/// max|got - want| / max(max|want|, kRefFloor); infinity when got has a NaN or inf where want has none.
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want, size_t* worst = nullptr) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isfinite(got[i]) != std::isfinite(want[i])) {
      if (worst) *worst = i;
      return std::numeric_limits<double>::infinity();
    }
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (e > err) {
      err = e;
      if (worst) *worst = i;
    }
    ref = std::max(ref, std::fabs(double(want[i])));
  }
  return err / std::max(ref, kRefFloor);
}

/// Where the heads sit in the host buffers (cuda_flash_attention.h's AttentionLayout): query i of
/// head h in batch b at q[(b Tq + i) q_token + h hs], key j of kv head h / (NH / NKV) at
/// k[(b Tk + j) kv_token + ...]; query i at position Tk - Tq + i.
struct Heads {
  int B, NH, NKV, Tq, Tk, hs;
  size_t q_token, kv_token;
};

/// lse[b, h, i] = log sum_j exp(q.k_j / sqrt(hs)) over the causal keys, in double.
std::vector<float> reference_lse(const std::vector<float>& q, const std::vector<float>& k, const Heads& s) {
  std::vector<float> lse(size_t(s.B) * s.NH * s.Tq);
  const double scale = 1.0 / std::sqrt(double(s.hs));
  std::vector<double> scores(s.Tk);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.Tq; ++i) {
        const float* qi = &q[(size_t(b) * s.Tq + i) * s.q_token + size_t(h) * s.hs];
        const int last = s.Tk - s.Tq + i, g = h / (s.NH / s.NKV);
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= last; ++j) {
          const float* kj = &k[(size_t(b) * s.Tk + j) * s.kv_token + size_t(g) * s.hs];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += double(qi[d]) * double(kj[d]);
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int j = 0; j <= last; ++j) sum += std::exp(scores[j] - mx);
        lse[(size_t(b) * s.NH + h) * s.Tq + i] = float(mx + std::log(sum));
      }
  return lse;
}

class FlashAttention : public CpuGpuTest {
 public:

  template <typename T>
  DeviceArray<T> upload(Backend& b, const std::vector<T>& host) {
    DeviceArray<T> a(b, host.size());
    b.copy_from_host(a.data(), host.data(), host.size() * sizeof(T));
    return a;
  }

  /// A bf16 output of both sides (from element `off` on), within kBf16Tol of each other.
  void expect_close(const DeviceArray<bf16>& g, const DeviceArray<bf16>& c, size_t off, const std::string& what) {
    const auto got = widen(read(*gpu, g), off), want = widen(read(*cpu, c), off);
    size_t worst = 0;
    const double err = max_rel_error(got, want, &worst);
    EXPECT_LE(err, kBf16Tol) << what << ": max-relative error " << err << ", worst at [" << worst << "]: gpu "
                             << got[worst] << ", cpu " << want[worst];
  }

  void expect_lse(const DeviceArray<float>& g, const std::vector<float>& want, const std::string& what) {
    const auto got = read(*gpu, g);
    double err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double e =
          std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) : std::numeric_limits<double>::infinity();
      if (e > err) err = e, worst = i;
    }
    EXPECT_LE(err, kLseTol) << what << ": lse off by " << err << " at [" << worst << "]: gpu " << got[worst]
                            << ", reference " << want[worst];
  }

  /// The backward again, bit for bit: the same bits in every output.
  void expect_same_bits(const std::vector<bf16>& first, const DeviceArray<bf16>& again, const std::string& what) {
    const auto second = read(*gpu, again);
    size_t mismatches = 0;
    for (size_t i = 0; i < first.size(); ++i) mismatches += first[i].bits != second[i].bits;
    EXPECT_EQ(mismatches, 0u) << what << ": a second backward changed " << mismatches << " of " << first.size()
                              << " elements (not deterministic)";
  }
};

/// The path a case is written for: flash attention, or the widened-fp32 fallback.
enum class Path { kFlash, kFallback };

/// Fails the case unless cuda_attention_bf16.cu's dispatch, flash_attention_supported(l, pointers)
/// on the same pointers, takes `want`.
::testing::AssertionResult takes_path(Path want, const cuda::AttentionLayout& l,
                                      std::initializer_list<const void*> pointers) {
  const bool flash = cuda::flash_attention_supported(l, pointers);
  if (flash == (want == Path::kFlash)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the dispatch takes " << (flash ? "flash attention" : "the fallback")
                                       << ", not the path this case tests"
                                       << (flash ? "" : cat(" (", cuda::flash_attention_unsupported_reason(
                                                                     l, pointers, {}), ")"));
}

// GPT-2's packed attention: qkv[B,T,3C], out[B,T,C]; every bf16 tensor offset by `off` elements
// (off = 1 takes the fallback: not 16-byte aligned).
void check_packed(FlashAttention& t, Path path, int B, int T, int NH, int hs, size_t off = 0) {
  const int C = NH * hs;
  const size_t n_qkv = size_t(B) * T * 3 * C, n_out = size_t(B) * T * C;
  const std::string shape = cat(" (packed B", B, " T", T, " NH", NH, " hs", hs, off ? " unaligned" : "", ")");
  const auto qkv_h = random_bf16(n_qkv + off, 1), dout_h = random_bf16(n_out + off, 2);
  const auto fill_out = random_bf16(n_out + off, 3), fill_dqkv = random_bf16(n_qkv + off, 4);  // overwritten
  Backend &g = *t.gpu, &c = *t.cpu;
  auto qkv_g = t.upload(g, qkv_h), qkv_c = t.upload(c, qkv_h), dout_g = t.upload(g, dout_h),
       dout_c = t.upload(c, dout_h);
  auto out_g = t.upload(g, fill_out), out_c = t.upload(c, fill_out);
  DeviceArray<float> lse_g(g, size_t(B) * NH * T), att_c(c, size_t(B) * NH * T * T);
  auto dqkv_g = t.upload(g, fill_dqkv), dqkv_c = t.upload(c, fill_dqkv);
  const cuda::AttentionLayout l = cuda::packed_attention_layout(B, T, C, NH);
  ASSERT_TRUE(takes_path(path, l, {out_g.data() + off, qkv_g.data() + off})) << "forward" << shape;
  ASSERT_TRUE(takes_path(path, l, {dqkv_g.data() + off, dout_g.data() + off, out_g.data() + off, qkv_g.data() + off}))
      << "backward" << shape;

  g.ops_bf16().attention_forward(out_g.data() + off, lse_g.data(), qkv_g.data() + off, B, T, C, NH);
  g.synchronize();
  c.ops_bf16().attention_forward(out_c.data() + off, att_c.data(), qkv_c.data() + off, B, T, C, NH);
  t.expect_close(out_g, out_c, off, "out" + shape);
  const auto qkv = widen(qkv_h, off);
  const Heads heads{B, NH, NH, T, T, hs, 3 * size_t(C), 3 * size_t(C)};
  t.expect_lse(lse_g, reference_lse(qkv, std::vector<float>(qkv.begin() + C, qkv.end()), heads), "lse" + shape);

  g.ops_bf16().attention_backward(dqkv_g.data() + off, dout_g.data() + off, out_g.data() + off, qkv_g.data() + off,
                                  lse_g.data(), B, T, C, NH);
  g.synchronize();
  c.ops_bf16().attention_backward(dqkv_c.data() + off, dout_c.data() + off, out_c.data() + off, qkv_c.data() + off,
                                  att_c.data(), B, T, C, NH);
  t.expect_close(dqkv_g, dqkv_c, off, "dqkv" + shape);
  const auto first = FlashAttention::read(g, dqkv_g);
  g.ops_bf16().attention_backward(dqkv_g.data() + off, dout_g.data() + off, out_g.data() + off, qkv_g.data() + off,
                                  lse_g.data(), B, T, C, NH);
  g.synchronize();
  t.expect_same_bits(first, dqkv_g, "dqkv" + shape);
}

// Grouped-query attention: q, out [B,Tq,NH,hs], k, v [B,Tk,NKV,hs]; the backward where Tq = Tk.
void check_gqa(FlashAttention& t, Path path, int B, int Tq, int Tk, int NH, int NKV, int hs, size_t off = 0) {
  const size_t nq = size_t(B) * Tq * NH * hs, nkv = size_t(B) * Tk * NKV * hs;
  const std::string shape =
      cat(" (gqa B", B, " Tq", Tq, " Tk", Tk, " NH", NH, " NKV", NKV, " hs", hs, off ? " unaligned" : "", ")");
  const auto q_h = random_bf16(nq + off, 11), k_h = random_bf16(nkv + off, 12), v_h = random_bf16(nkv + off, 13);
  const auto dout_h = random_bf16(nq + off, 14), fill_q = random_bf16(nq + off, 15),
             fill_kv = random_bf16(nkv + off, 16);
  Backend &g = *t.gpu, &c = *t.cpu;
  auto q_g = t.upload(g, q_h), k_g = t.upload(g, k_h), v_g = t.upload(g, v_h), dout_g = t.upload(g, dout_h);
  auto q_c = t.upload(c, q_h), k_c = t.upload(c, k_h), v_c = t.upload(c, v_h), dout_c = t.upload(c, dout_h);
  auto out_g = t.upload(g, fill_q), out_c = t.upload(c, fill_q);
  DeviceArray<float> lse_g(g, size_t(B) * NH * Tq), att_c(c, size_t(B) * NH * Tq * Tk);
  const cuda::AttentionLayout l = cuda::gqa_attention_layout(B, Tq, Tk, NH, NKV, hs);
  ASSERT_TRUE(takes_path(path, l, {out_g.data() + off, q_g.data() + off, k_g.data() + off, v_g.data() + off}))
      << "forward" << shape;

  g.ops_bf16().gqa_attention_forward(out_g.data() + off, lse_g.data(), q_g.data() + off, k_g.data() + off,
                                     v_g.data() + off, B, Tq, Tk, NH, NKV, hs);
  g.synchronize();
  c.ops_bf16().gqa_attention_forward(out_c.data() + off, att_c.data(), q_c.data() + off, k_c.data() + off,
                                     v_c.data() + off, B, Tq, Tk, NH, NKV, hs);
  t.expect_close(out_g, out_c, off, "out" + shape);
  const Heads heads{B, NH, NKV, Tq, Tk, hs, size_t(NH) * hs, size_t(NKV) * hs};
  t.expect_lse(lse_g, reference_lse(widen(q_h, off), widen(k_h, off), heads), "lse" + shape);
  if (Tq != Tk) return;

  auto dq_g = t.upload(g, fill_q), dk_g = t.upload(g, fill_kv), dv_g = t.upload(g, fill_kv);
  auto dq_c = t.upload(c, fill_q), dk_c = t.upload(c, fill_kv), dv_c = t.upload(c, fill_kv);
  ASSERT_TRUE(takes_path(path, l,
                         {dq_g.data() + off, dk_g.data() + off, dv_g.data() + off, dout_g.data() + off,
                          out_g.data() + off, q_g.data() + off, k_g.data() + off, v_g.data() + off}))
      << "backward" << shape;
  auto backward_gpu = [&] {
    g.ops_bf16().gqa_attention_backward(dq_g.data() + off, dk_g.data() + off, dv_g.data() + off, dout_g.data() + off,
                                        out_g.data() + off, q_g.data() + off, k_g.data() + off, v_g.data() + off,
                                        lse_g.data(), B, Tq, NH, NKV, hs);
    g.synchronize();
  };
  backward_gpu();
  c.ops_bf16().gqa_attention_backward(dq_c.data() + off, dk_c.data() + off, dv_c.data() + off, dout_c.data() + off,
                                      out_c.data() + off, q_c.data() + off, k_c.data() + off, v_c.data() + off,
                                      att_c.data(), B, Tq, NH, NKV, hs);
  t.expect_close(dq_g, dq_c, off, "dq" + shape);
  t.expect_close(dk_g, dk_c, off, "dk" + shape);
  t.expect_close(dv_g, dv_c, off, "dv" + shape);
  const auto dq1 = FlashAttention::read(g, dq_g), dk1 = FlashAttention::read(g, dk_g),
             dv1 = FlashAttention::read(g, dv_g);
  backward_gpu();
  t.expect_same_bits(dq1, dq_g, "dq" + shape);
  t.expect_same_bits(dk1, dk_g, "dk" + shape);
  t.expect_same_bits(dv1, dv_g, "dv" + shape);
}

constexpr int kLengths[] = {1, 17, 64, 129, 1024};

TEST_F(FlashAttention, TableSavesLse) { EXPECT_TRUE(gpu->ops_bf16().attention_saves_lse()); }

// Three heads a batch of two (one head of two at T = 1024, to keep the CPU reference short).
TEST_F(FlashAttention, GptPacked) {
  for (int hs : {64, 128})
    for (int T : kLengths) check_packed(*this, Path::kFlash, T >= 1024 ? 1 : 2, T, T >= 1024 ? 2 : 3, hs);
}

TEST_F(FlashAttention, GroupedQuery) {
  for (int hs : {64, 128})
    for (int T : kLengths) check_gqa(*this, Path::kFlash, T >= 1024 ? 1 : 2, T, T, 8, 2, hs);
}

// Forward only: new queries after cached keys (query i at position Tk - Tq + i).
TEST_F(FlashAttention, KvCache) {
  for (int hs : {64, 128}) {
    check_gqa(*this, Path::kFlash, 2, 5, 37, 8, 2, hs);    // a chunk of 5 after 32 cached
    check_gqa(*this, Path::kFlash, 2, 1, 33, 8, 2, hs);    // decoding one token
    check_gqa(*this, Path::kFlash, 1, 70, 200, 8, 2, hs);  // two query tiles, the diagonal crossing key tiles
  }
}

// The reason the fallback logs (cuda_attention_bf16.cu, once per process) names what flash lacks.
TEST(FlashAttentionDispatch, FallbackReason) {
  alignas(16) static const char buf[64] = {};
  const auto reason = [](const cuda::AttentionLayout& l, std::initializer_list<const void*> pointers,
                         std::initializer_list<const char*> names) {
    return cuda::flash_attention_unsupported_reason(l, pointers, names);
  };
  const cuda::AttentionLayout ok = cuda::gqa_attention_layout(1, 8, 8, 8, 2, 64);
  EXPECT_EQ(reason(ok, {buf, buf + 16}, {"q", "k"}), "");
  EXPECT_EQ(reason(ok, {buf, buf + 2, buf + 16, buf + 18}, {"out", "q", "k", "v"}), "q, v not 16-byte aligned");
  EXPECT_EQ(reason(cuda::gqa_attention_layout(1, 8, 8, 8, 2, 48), {buf}, {"q"}), "head size 48; flash takes 64 or 128");
  EXPECT_EQ(reason(cuda::gqa_attention_layout(1, 9, 8, 8, 2, 128), {buf}, {"q"}), "fewer keys (8) than queries (9)");
  EXPECT_EQ(reason(cuda::packed_attention_layout(1, 8, 68, 1), {buf}, {"qkv"}), "head size 68; flash takes 64 or 128");
  cuda::AttentionLayout odd = ok;
  odd.kv_token = 130;
  EXPECT_EQ(reason(odd, {buf}, {"q"}), "token strides q 512, kv 130, out 512 elements, not all multiples of 8");
}

// What flash attention does not take goes through the widened fp32 kernels, still saving lse.
TEST_F(FlashAttention, Fallback) {
  check_gqa(*this, Path::kFallback, 2, 45, 45, 8, 2, 32);     // head size 32
  check_gqa(*this, Path::kFallback, 2, 5, 37, 4, 2, 24);      // head size 24, with a KV cache
  check_packed(*this, Path::kFallback, 2, 37, 4, 16);         // head size 16
  check_gqa(*this, Path::kFallback, 1, 70, 70, 8, 2, 64, 1);  // pointers one element off
  check_packed(*this, Path::kFallback, 1, 70, 2, 128, 1);     // the same, packed
}

}  // namespace
}  // namespace zt
