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

// fn(scratch, b, i) for every b < B and i < n, in parallel, each thread with its own Scratch; the
// first exception is thrown again after the region.
template <typename Fn>
void parallel_tasks(int B, int n, int keys, int hs, bool backward, Fn fn) {
  FirstError error;
#pragma omp parallel
  {
    std::optional<Scratch> w;
    error.guard([&] { w.emplace(keys, hs, backward); });
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) {
        error.guard([&] {
          if (w) fn(*w, b, i);  // (no scratch: its allocation's error is kept)
        });
      }
    }
  }
  error.rethrow();
}

// Rows of scores s[rows, keys] (row i sees keys 0..first + i) into bf16 probabilities p (masked
// keys 0) and each row's logsumexp, all in fp32.
void causal_softmax(float* s, bf16* p, float* lse, int rows, int keys, int first, float scale) {
  for (int i = 0; i < rows; ++i) {
    float* a = s + size_t(i) * keys;
    bf16* pr = p + size_t(i) * keys;
    const int last = first + i;
    float maxval = -std::numeric_limits<float>::infinity();
    for (int j = 0; j <= last; ++j) maxval = std::max(maxval, a[j] * scale);
    float sum = 0;
    for (int j = 0; j <= last; ++j) {
      a[j] = vexp(a[j] * scale - maxval);
      sum += a[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j <= last; ++j) pr[j] = to_bf16(a[j] * inv);
    std::fill(pr + last + 1, pr + keys, bf16{});
    lse[i] = maxval + std::log(sum);
  }
}

// The backward's rows: P = exp(S scale - lse) and dS = P (dP - D) scale, both rounded to bf16
// (masked keys 0), D = rowsum(dO * O) from the forward's output (rows of `ld`).
void softmax_backward(const float* s, const float* dp, bf16* p, bf16* ds, const float* lse, const bf16* dout,
                      const bf16* out, size_t ld, int rows, int keys, int hs, int first, float scale) {
  for (int i = 0; i < rows; ++i) {
    const float *a = s + size_t(i) * keys, *da = dp + size_t(i) * keys;
    bf16 *pr = p + size_t(i) * keys, *dsr = ds + size_t(i) * keys;
    const int last = first + i;
    const bf16 *go = dout + size_t(i) * ld, *o = out + size_t(i) * ld;
    float D = 0;
    for (int c = 0; c < hs; ++c) D += to_float(go[c]) * to_float(o[c]);
    for (int j = 0; j <= last; ++j) {
      const float pj = vexp(a[j] * scale - lse[i]);
      pr[j] = to_bf16(pj);
      dsr[j] = to_bf16(pj * (da[j] - D) * scale);
    }
    std::fill(pr + last + 1, pr + keys, bf16{});
    std::fill(dsr + last + 1, dsr + keys, bf16{});
  }
}

}  // namespace

void bf16_attention_forward(Bf16Gemm& gemm, const AttentionShape& s, bf16* out, float* lse, const bf16* q,
                            const bf16* k, const bf16* v) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq, hs = s.hs;
  parallel_tasks(s.B, s.NH, s.Tk, hs, false, [&](Scratch& w, int b, int h) {
    const size_t kv0 = size_t(b) * s.Tk * s.kv_row + size_t(h / group) * hs;
    pack(k + kv0, s.kv_row, s.Tk, hs, w.k.data());
    pack(v + kv0, s.kv_row, s.Tk, hs, w.v.data());
    for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
      const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;  // the last row's keys
      pack(q + (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * hs, s.q_row, rows, hs, w.q.data());
      gemm.gemm(false, true, rows, keys, hs, w.q.data(), hs, w.k.data(), hs, 0.0f, w.s.data(), keys);
      causal_softmax(w.s.data(), w.p16.data(), lse + (size_t(b) * s.NH + h) * s.Tq + t0, rows, keys, past + t0,
                     scale);
      gemm.gemm(false, false, rows, hs, keys, w.p16.data(), keys, w.v.data(), hs, 0.0f, w.o.data(), hs);
      unpack(w.o.data(), rows, hs, out + (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * hs, s.out_row);
    }
  });
}

// Each (b, kv head) owns its dk and dv rows and the dq rows of its query heads, so the groups run
// in parallel without races and every sum's order is fixed whatever the thread count.
void bf16_attention_backward(Bf16Gemm& gemm, const AttentionShape& s, bf16* dq, bf16* dk, bf16* dv,
                             const bf16* dout, const bf16* out, const bf16* q, const bf16* k, const bf16* v,
                             const float* lse) {
  const float scale = 1.0f / std::sqrt(float(s.hs));
  const int group = s.NH / s.NKV, past = s.Tk - s.Tq, hs = s.hs;
  parallel_tasks(s.B, s.NKV, s.Tk, hs, true, [&](Scratch& w, int b, int kvh) {
    const size_t kv0 = size_t(b) * s.Tk * s.kv_row + size_t(kvh) * hs;
    pack(k + kv0, s.kv_row, s.Tk, hs, w.k.data());
    pack(v + kv0, s.kv_row, s.Tk, hs, w.v.data());
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int t0 = 0; t0 < s.Tq; t0 += kBlock) {
        const int rows = std::min(kBlock, s.Tq - t0), keys = past + t0 + rows;
        const size_t qi = (size_t(b) * s.Tq + t0) * s.q_row + size_t(h) * hs;
        const size_t oi = (size_t(b) * s.Tq + t0) * s.out_row + size_t(h) * hs;
        pack(q + qi, s.q_row, rows, hs, w.q.data());
        pack(dout + oi, s.out_row, rows, hs, w.g.data());
        gemm.gemm(false, true, rows, keys, hs, w.q.data(), hs, w.k.data(), hs, 0.0f, w.s.data(), keys);
        gemm.gemm(false, true, rows, keys, hs, w.g.data(), hs, w.v.data(), hs, 0.0f, w.dp.data(), keys);
        softmax_backward(w.s.data(), w.dp.data(), w.p16.data(), w.ds16.data(), lse + (size_t(b) * s.NH + h) * s.Tq + t0,
                         dout + oi, out + oi, s.out_row, rows, keys, hs, past + t0, scale);
        gemm.gemm(false, false, rows, hs, keys, w.ds16.data(), keys, w.k.data(), hs, 0.0f, w.o.data(), hs);
        unpack(w.o.data(), rows, hs, dq + qi, s.q_row);
        gemm.gemm(true, false, keys, hs, rows, w.ds16.data(), keys, w.q.data(), hs, 1.0f, w.dk.data(), hs);
        gemm.gemm(true, false, keys, hs, rows, w.p16.data(), keys, w.g.data(), hs, 1.0f, w.dv.data(), hs);
      }
    }
    for (int j = 0; j < s.Tk; ++j) {
      convert(w.dk.data() + size_t(j) * hs, dk + kv0 + size_t(j) * s.kv_row, size_t(hs));
      convert(w.dv.data() + size_t(j) * hs, dv + kv0 + size_t(j) * s.kv_row, size_t(hs));
    }
  });
}

}  // namespace zt::cpu
