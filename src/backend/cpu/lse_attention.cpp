// Each (sequence, head) runs its queries in blocks of kBlock rows, each block's products as GEMMs
// on the strided rows as they lie (OpenBLAS, one thread a task: it runs serially inside the
// OpenMP tasks): S = Q Kᵀ over the keys the block sees, the causal softmax row by row in fp32,
// O = P V; the backward the same blocks again: P from S and the saved logsumexp, dP = dO Vᵀ,
// dS = P (dP - D), dQ = dS K, dK += dSᵀ Q, dV += Pᵀ dO.
#include "backend/cpu/lse_attention.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/fast_math.h"
#include "backend/cpu/gemm.h"

namespace zt::cpu {

namespace {

constexpr int kBlock = 64;  // query rows a block: its scores, kBlock x Tk floats, stay in L2

float dot(const float* a, const float* b, int n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

void lse_attention_forward(const AttentionShape& s, float* out, float* lse, const float* q, const float* k,
                           const float* v) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq;
  const int qld = int(s.q_row), kvld = int(s.kv_row), old = int(s.out_row);
#pragma omp parallel
  {
    std::vector<float> p(size_t(kBlock) * s.Tk);  // a block's scores, then its probabilities
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const float* kb = k + size_t(b) * s.Tk * s.kv_row + size_t(h / group) * s.hs;
        const float* vb = v + size_t(b) * s.Tk * s.kv_row + size_t(h / group) * s.hs;
        for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
          const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;  // the last row's keys
          const float* qb = q + (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * s.hs;
          gemm(false, true, rows, keys, s.hs, scale, qb, qld, kb, kvld, 0.0f, p.data(), keys);
          for (int i = 0; i < rows; ++i) {
            float* a = p.data() + size_t(i) * keys;
            const int last = past + t0 + i;  // keys 0..last are visible
            float maxval = -std::numeric_limits<float>::infinity();
            for (int j = 0; j <= last; ++j) maxval = std::max(maxval, a[j]);
            float sum = 0;
            for (int j = 0; j <= last; ++j) {
              a[j] = vexp(a[j] - maxval);
              sum += a[j];
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j <= last; ++j) a[j] *= inv;
            std::fill(a + last + 1, a + keys, 0.0f);
            lse[(size_t(b) * s.NH + h) * s.Tq + t0 + i] = maxval + std::log(sum);
          }
          float* ob = out + (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * s.hs;
          gemm(false, false, rows, s.hs, keys, 1.0f, p.data(), keys, vb, kvld, 0.0f, ob, old);
        }
      }
    }
  }
}

// Each (b, kv head) owns its dk and dv rows and the dq rows of its query heads, so the groups run
// in parallel without races and every sum's order is fixed whatever the thread count.
void lse_attention_backward(const AttentionShape& s, float* dq, float* dk, float* dv, const float* dout,
                            const float* out, const float* q, const float* k, const float* v, const float* lse) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq;
  const int qld = int(s.q_row), kvld = int(s.kv_row), old = int(s.out_row);
#pragma omp parallel
  {
    // A block's probabilities and d(probabilities), then d(scores) in place.
    std::vector<float> p(size_t(kBlock) * s.Tk), dp(size_t(kBlock) * s.Tk);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < s.B; ++b) {
      for (int kvh = 0; kvh < s.NKV; ++kvh) {
        const size_t kv0 = size_t(b) * s.Tk * s.kv_row + size_t(kvh) * s.hs;
        const float *kb = k + kv0, *vb = v + kv0;
        float *dkb = dk + kv0, *dvb = dv + kv0;
        for (int j = 0; j < s.Tk; ++j) {
          std::fill(dkb + size_t(j) * s.kv_row, dkb + size_t(j) * s.kv_row + s.hs, 0.0f);
          std::fill(dvb + size_t(j) * s.kv_row, dvb + size_t(j) * s.kv_row + s.hs, 0.0f);
        }
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
            const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;
            const size_t qi = (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * s.hs;
            const size_t oi = (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * s.hs;
            gemm(false, true, rows, keys, s.hs, scale, q + qi, qld, kb, kvld, 0.0f, p.data(), keys);
            gemm(false, true, rows, keys, s.hs, 1.0f, dout + oi, old, vb, kvld, 0.0f, dp.data(), keys);
            for (int i = 0; i < rows; ++i) {
              float *a = p.data() + size_t(i) * keys, *da = dp.data() + size_t(i) * keys;
              const int last = past + t0 + i;
              const float L = lse[(size_t(b) * s.NH + h) * s.Tq + t0 + i];
              // D = rowsum(dO * O) = sum_j p_j dp_j, from the forward's output.
              const float D = dot(dout + oi + size_t(i) * s.out_row, out + oi + size_t(i) * s.out_row, s.hs);
              for (int j = 0; j <= last; ++j) {
                a[j] = vexp(a[j] - L);
                da[j] = a[j] * (da[j] - D) * scale;
              }
              std::fill(a + last + 1, a + keys, 0.0f);
              std::fill(da + last + 1, da + keys, 0.0f);
            }
            gemm(false, false, rows, s.hs, keys, 1.0f, dp.data(), keys, kb, kvld, 0.0f, dq + qi, qld);
            gemm(true, false, keys, s.hs, rows, 1.0f, dp.data(), keys, q + qi, qld, 1.0f, dkb, kvld);
            gemm(true, false, keys, s.hs, rows, 1.0f, p.data(), keys, dout + oi, old, 1.0f, dvb, kvld);
          }
        }
      }
    }
  }
}

}  // namespace zt::cpu
