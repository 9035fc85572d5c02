// Each task's queries run in blocks of kBlock rows: S = Q Kᵀ over the keys the block sees (fp32),
// the causal softmax row by row in fp32, P rounded to bf16, O = P V; the backward the same blocks
// again: P from S and the saved logsumexp, dP = dO Vᵀ, dS = P (dP - D), dQ = dS K, dK += dSᵀ Q,
// dV += Pᵀ dO (as lse_attention.cpp, whose fp32 products these are in bf16).
#include "backend/cpu/bf16_attention.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/cpu/fast_math.h"

namespace zt::cpu {

namespace {

constexpr int kBlock = 64;  // query rows a block

// rows x hs values whose rows lie `ld` apart, into a dense [rows, hs] (and back).
void pack(const bf16* src, size_t ld, int rows, int hs, bf16* dst) {
  for (int r = 0; r < rows; ++r) std::copy_n(src + size_t(r) * ld, hs, dst + size_t(r) * hs);
}
void unpack(const bf16* src, int rows, int hs, bf16* dst, size_t ld) {
  for (int r = 0; r < rows; ++r) std::copy_n(src + size_t(r) * hs, hs, dst + size_t(r) * ld);
}

// An exception must not leave an OpenMP region (that terminates): each task runs guarded, the
// first exception is kept and thrown again after the region (a GEMM can throw: oneDNN failing to
// create a primitive, memory running out).
class FirstError {
 public:
  template <typename Fn>
  void guard(Fn&& fn) {
    try {
      fn();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

// One thread's buffers for a task over `keys` keys of a head of hs.
struct Scratch {
  std::vector<bf16> k, v, q, o, p16, ds16, g;  // g: a block of dout, packed
  std::vector<float> s, dp, dk, dv;
  Scratch(int keys, int hs, bool backward)
      : k(size_t(keys) * hs), v(size_t(keys) * hs), q(size_t(kBlock) * hs), o(size_t(kBlock) * hs),
        p16(size_t(kBlock) * keys), s(size_t(kBlock) * keys) {
    if (!backward) return;
    ds16.resize(size_t(kBlock) * keys);
    g.resize(size_t(kBlock) * hs);
    dp.resize(size_t(kBlock) * keys);
    dk.resize(size_t(keys) * hs);
    dv.resize(size_t(keys) * hs);
  }
};

}  // namespace

void bf16_attention_forward(Bf16Gemm& gemm, const AttentionShape& s, bf16* out, float* lse, const bf16* q,
                            const bf16* k, const bf16* v) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq, hs = s.hs;
  FirstError error;
#pragma omp parallel
  {
    std::optional<Scratch> w;
    error.guard([&] { w.emplace(s.Tk, hs, false); });
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) error.guard([&] {
        if (!w) return;  // its allocation failed: that error is kept
        const size_t kv0 = size_t(b) * s.Tk * s.kv_row + size_t(h / group) * hs;
        pack(k + kv0, s.kv_row, s.Tk, hs, w->k.data());
        pack(v + kv0, s.kv_row, s.Tk, hs, w->v.data());
        for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
          const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;  // the last row's keys
          pack(q + (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * hs, s.q_row, rows, hs, w->q.data());
          gemm.gemm(false, true, rows, keys, hs, w->q.data(), hs, w->k.data(), hs, 0.0f, w->s.data(), keys);
          for (int i = 0; i < rows; ++i) {
            float* a = w->s.data() + size_t(i) * keys;
            bf16* p = w->p16.data() + size_t(i) * keys;
            const int last = past + t0 + i;  // keys 0..last are visible
            float maxval = -std::numeric_limits<float>::infinity();
            for (int j = 0; j <= last; ++j) maxval = std::max(maxval, a[j] * scale);
            float sum = 0;
            for (int j = 0; j <= last; ++j) {
              a[j] = vexp(a[j] * scale - maxval);
              sum += a[j];
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j <= last; ++j) p[j] = to_bf16(a[j] * inv);
            std::fill(p + last + 1, p + keys, bf16{});
            lse[(size_t(b) * s.NH + h) * s.Tq + t0 + i] = maxval + std::log(sum);
          }
          gemm.gemm(false, false, rows, hs, keys, w->p16.data(), keys, w->v.data(), hs, 0.0f, w->o.data(), hs);
          unpack(w->o.data(), rows, hs, out + (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * hs, s.out_row);
        }
      });
    }
  }
  error.rethrow();
}

// Each (b, kv head) owns its dk and dv rows and the dq rows of its query heads, so the groups run
// in parallel without races and every sum's order is fixed whatever the thread count.
void bf16_attention_backward(Bf16Gemm& gemm, const AttentionShape& s, bf16* dq, bf16* dk, bf16* dv,
                             const bf16* dout, const bf16* out, const bf16* q, const bf16* k, const bf16* v,
                             const float* lse) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq, hs = s.hs;
  FirstError error;
#pragma omp parallel
  {
    std::optional<Scratch> w;
    error.guard([&] { w.emplace(s.Tk, hs, true); });
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < s.B; ++b) {
      for (int kvh = 0; kvh < s.NKV; ++kvh) error.guard([&] {
        if (!w) return;
        const size_t kv0 = size_t(b) * s.Tk * s.kv_row + size_t(kvh) * hs;
        pack(k + kv0, s.kv_row, s.Tk, hs, w->k.data());
        pack(v + kv0, s.kv_row, s.Tk, hs, w->v.data());
        std::fill(w->dk.begin(), w->dk.end(), 0.0f);
        std::fill(w->dv.begin(), w->dv.end(), 0.0f);
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
            const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;
            const size_t qi = (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * hs;
            const size_t oi = (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * hs;
            pack(q + qi, s.q_row, rows, hs, w->q.data());
            pack(dout + oi, s.out_row, rows, hs, w->g.data());
            gemm.gemm(false, true, rows, keys, hs, w->q.data(), hs, w->k.data(), hs, 0.0f, w->s.data(), keys);
            gemm.gemm(false, true, rows, keys, hs, w->g.data(), hs, w->v.data(), hs, 0.0f, w->dp.data(), keys);
            for (int i = 0; i < rows; ++i) {
              const float *a = w->s.data() + size_t(i) * keys, *da = w->dp.data() + size_t(i) * keys;
              bf16 *p = w->p16.data() + size_t(i) * keys, *ds = w->ds16.data() + size_t(i) * keys;
              const int last = past + t0 + i;
              const float L = lse[(size_t(b) * s.NH + h) * s.Tq + t0 + i];
              // D = rowsum(dO * O) = sum_j p_j dp_j, from the forward's output.
              const bf16 *go = dout + oi + size_t(i) * s.out_row, *o = out + oi + size_t(i) * s.out_row;
              float D = 0;
              for (int c = 0; c < hs; ++c) D += to_float(go[c]) * to_float(o[c]);
              for (int j = 0; j <= last; ++j) {
                const float pj = vexp(a[j] * scale - L);
                p[j] = to_bf16(pj);
                ds[j] = to_bf16(pj * (da[j] - D) * scale);
              }
              std::fill(p + last + 1, p + keys, bf16{});
              std::fill(ds + last + 1, ds + keys, bf16{});
            }
            gemm.gemm(false, false, rows, hs, keys, w->ds16.data(), keys, w->k.data(), hs, 0.0f, w->o.data(), hs);
            unpack(w->o.data(), rows, hs, dq + qi, s.q_row);
            gemm.gemm(true, false, keys, hs, rows, w->ds16.data(), keys, w->q.data(), hs, 1.0f, w->dk.data(), hs);
            gemm.gemm(true, false, keys, hs, rows, w->p16.data(), keys, w->g.data(), hs, 1.0f, w->dv.data(), hs);
          }
        }
        for (int j = 0; j < s.Tk; ++j) {
          convert(w->dk.data() + size_t(j) * hs, dk + kv0 + size_t(j) * s.kv_row, size_t(hs));
          convert(w->dv.data() + size_t(j) * hs, dv + kv0 + size_t(j) * s.kv_row, size_t(hs));
        }
      });
    }
  }
  error.rethrow();
}

}  // namespace zt::cpu
