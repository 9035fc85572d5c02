// KernelOps<bf16> on host memory. Each op reads bf16, computes in fp32 and rounds each bf16
// output once, as a GPU's bf16 kernels do; its parameter gradients and statistics are fp32
// already (KernelTypes<bf16>). The embedding and the bias gradients run on the bf16 values
// directly; every other op widens its operands to fp32 a tile at a time and runs fp32 code on
// the tile (bf16_tiles.h): rows or whole sequences where they are independent, and for the GEMMs
// output tiles with the inner dimension whole, so that each output element sums the same
// products as one call over the whole operands (OpenBLAS may round them differently: it picks
// its kernels by the shape). So the scratch is at most a budget (plus one tile's, where a single
// row or sequence is larger), not the largest op's operands; it counts in the device pool, the
// memory standing in for it on the CPU. The fp32 code is the fp32 kernels' (an fp32 run's), but
// for attention, which saves each row's logsumexp rather than its probabilities
// (lse_attention.h), as the GPU's flash attention does. Asked for bf16 GEMMs where oneDNN's bf16
// GEMMs are the faster (bf16_gemm.h), the GEMMs and attention widen nothing: they run on the bf16
// operands as they lie (bf16_attention.h).
#include <algorithm>
#include <memory>

#include "backend/cpu/bf16_attention.h"
#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/lse_attention.h"
#include "core/error.h"
#include "core/memory_pool.h"

namespace zt::cpu {

namespace {

// Rows [r0, r0 + rows) x columns [c0, c0 + cols) of a row-major bf16 matrix with `ld` columns,
// widened into dst[rows, cols].
void widen_block(const bf16* src, size_t ld, size_t r0, size_t rows, size_t c0, size_t cols, float* dst) {
  if (cols == ld) return convert(src + r0 * ld, dst, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 16))
  for (size_t r = 0; r < rows; ++r) convert(src + (r0 + r) * ld + c0, dst + r * cols, cols);
}

// src[rows, cols] rounded into the block at (r0, c0) of a row-major bf16 matrix with `ld` columns.
void narrow_block(const float* src, size_t rows, size_t cols, bf16* dst, size_t ld, size_t r0, size_t c0) {
  if (cols == ld) return convert(src, dst + r0 * ld, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 16))
  for (size_t r = 0; r < rows; ++r) convert(src + r * cols, dst + (r0 + r) * ld + c0, cols);
}

class Bf16Kernels final : public KernelOps<bf16> {
  using T = bf16;

 public:
  Bf16Kernels(std::unique_ptr<KernelOps<float>> f32, size_t budget, Bf16Gemm* in_place)
      : own_(std::move(f32)), f_(*own_), budget_(budget), in_place_(in_place) {}
  ~Bf16Kernels() override { pool_counter(Pool::kDevice).sub(arena_floats_ * sizeof(float)); }
  Bf16Kernels(const Bf16Kernels&) = delete;
  Bf16Kernels& operator=(const Bf16Kernels&) = delete;

  // GEMM inputs are bf16 values whatever is asked. Asked for bf16, the GEMMs run through oneDNN's
  // bf16 matmul on the bf16 operands as they lie where the CPU has bf16 instructions (no tiles, no
  // scratch); elsewhere, and when not asked, tiles widened to fp32 through OpenBLAS.
  DType set_matmul_dtype(DType dtype) override {
    bf16_gemm_ = dtype == DType::kBF16 ? in_place_ : nullptr;
    return DType::kBF16;
  }

  // Only oneDNN's GEMMs want a layout of their own; the widened tiles read weights as they lie.
  bool weight_packs(const void* lo, const void* hi, WeightPacks what) override {
    if (!in_place_) return false;
    // Not asked for bf16 GEMMs, or not asked for packs: none kept. kStale and kDrop always reach
    // the GEMM, whatever the setting says by then.
    if (what == WeightPacks::kKeep && (!bf16_gemm_ || !bf16_weight_packs_enabled())) return false;
    in_place_->weight_packs(lo, hi, what);
    return true;
  }

  void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                         int C) override {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T_; ++t) {
        T* o = out + (size_t(b) * T_ + t) * C;
        const T* w = wte + size_t(tokens[b * T_ + t]) * C;
        if (!wpe) {
          std::copy(w, w + C, o);
          continue;
        }
        const T* p = wpe + size_t(t) * C;
        for (int c = 0; c < C; ++c) o[c] = to_bf16(to_float(w[c]) + to_float(p[c]));
      }
    }
  }
  // As the fp32 kernel: split by channel, each channel's rows added in order.
  void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C) override {
#pragma omp parallel
    {
      const int threads = omp_get_num_threads(), id = omp_get_thread_num();
      const int chunk = (C + threads - 1) / threads, c0 = std::min(C, id * chunk), c1 = std::min(C, c0 + chunk);
      for (int b = 0; b < B; ++b) {
        for (int t = 0; t < T_; ++t) {
          const T* d = dout + (size_t(b) * T_ + t) * C;
          G* w = dwte + size_t(tokens[b * T_ + t]) * C;
          for (int c = c0; c < c1; ++c) w[c] += to_float(d[c]);
          if (!dwpe) continue;
          G* p = dwpe + size_t(t) * C;
          for (int c = c0; c < c1; ++c) p[c] += to_float(d[c]);
        }
      }
    }
  }

  void layernorm_forward(T* out, S* mean, S* rstd, const T* x, const T* weight, const T* bias, int rows, int C,
                         double eps) override {
    const size_t c = size_t(C);
    Tiles tiles(*this, size_t(rows), 2 * c, 2 * c);
    const float *w = tiles.in(weight, c), *b = tiles.in(bias, c);
    float *xf = tiles.take(c), *o = tiles.take(c);
    for (auto [r0, n] : tiles) {
      convert(x + r0 * c, xf, n * c);
      f_.layernorm_forward(o, mean + r0, rstd + r0, xf, w, b, int(n), C, eps);
      convert(o, out + r0 * c, n * c);
    }
  }
  void layernorm_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, const S* mean,
                          const S* rstd, int rows, int C) override {
    const size_t c = size_t(C);
    Tiles tiles(*this, size_t(rows), 3 * c, c);
    const float* w = tiles.in(weight, c);
    float *d = tiles.take(c), *g = tiles.take(c), *xf = tiles.take(c);
    for (auto [r0, n] : tiles) {  // the weight gradients add row after row, as in one call
      convert(dx + r0 * c, d, n * c);  // dx +=
      convert(dout + r0 * c, g, n * c);
      convert(x + r0 * c, xf, n * c);
      f_.layernorm_backward(d, dweight, dbias, g, xf, w, mean + r0, rstd + r0, int(n), C);
      convert(d, dx + r0 * c, n * c);
    }
  }

  // The GPT-2 layout: weight [in, out].
  void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim, int out_dim) override {
    gemm(false, false, rows, out_dim, in_dim, x, weight, 0.0f, out, nullptr, bias);
  }
  void matmul_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows, int in_dim,
                       int out_dim) override {
    if (dx) gemm(false, true, rows, in_dim, out_dim, dout, weight, 0.0f, dx, nullptr, nullptr);
    gemm(true, false, in_dim, out_dim, rows, x, dout, 1.0f, nullptr, dweight, nullptr);
    if (dbias) column_sums_add(dbias, dout, rows, out_dim);
  }
  // nn.Linear's layout: weight [out, in].
  void linear_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim, int out_dim) override {
    gemm(false, true, rows, out_dim, in_dim, x, weight, 0.0f, out, nullptr, bias);
  }
  void linear_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows, int in_dim,
                       int out_dim, bool accumulate_dx) override {
    if (dx) gemm(false, false, rows, in_dim, out_dim, dout, weight, accumulate_dx ? 1.0f : 0.0f, dx, nullptr, nullptr);
    gemm(true, false, out_dim, in_dim, rows, dout, x, 1.0f, nullptr, dweight, nullptr);
    if (dbias) column_sums_add(dbias, dout, rows, out_dim);
  }

  // Attention saves each row's logsumexp, not the probabilities (lse_attention.h): O(T) memory
  // where they take O(T^2), the backward recomputing them. Whole sequences a tile.
  bool attention_saves_lse() const override { return true; }
  void attention_forward(T* out, S* att, const T* qkv, int B, int T_, int C, int NH) override {
    const size_t seq = size_t(T_) * size_t(C);
    const AttentionShape shape = packed_shape(T_, C, NH);
    if (bf16_gemm_) {
      return bf16_attention_forward(*bf16_gemm_, with_batch(shape, B), out, att, qkv, qkv + C, qkv + 2 * C);
    }
    Tiles tiles(*this, size_t(B), 4 * seq, 0);
    float *q = tiles.take(3 * seq), *o = tiles.take(seq);
    for (auto [b0, n] : tiles) {
      convert(qkv + b0 * 3 * seq, q, n * 3 * seq);
      lse_attention_forward(with_batch(shape, n), o, att + b0 * NH * T_, q, q + C, q + 2 * C);
      convert(o, out + b0 * seq, n * seq);
    }
  }
  void attention_backward(T* dqkv, const T* dout, const T* out, const T* qkv, const S* att, int B, int T_, int C,
                          int NH) override {
    const size_t seq = size_t(T_) * size_t(C);
    const AttentionShape shape = packed_shape(T_, C, NH);
    if (bf16_gemm_) {
      return bf16_attention_backward(*bf16_gemm_, with_batch(shape, B), dqkv, dqkv + C, dqkv + 2 * C, dout, out, qkv,
                                     qkv + C, qkv + 2 * C, att);
    }
    Tiles tiles(*this, size_t(B), 8 * seq, 0);
    float *d = tiles.take(3 * seq), *g = tiles.take(seq), *o = tiles.take(seq), *q = tiles.take(3 * seq);
    for (auto [b0, n] : tiles) {
      convert(dout + b0 * seq, g, n * seq);
      convert(out + b0 * seq, o, n * seq);
      convert(qkv + b0 * 3 * seq, q, n * 3 * seq);
      lse_attention_backward(with_batch(shape, n), d, d + C, d + 2 * C, g, o, q, q + C, q + 2 * C,
                             att + b0 * NH * T_);
      convert(d, dqkv + b0 * 3 * seq, n * 3 * seq);
    }
  }

  void gelu_forward(T* out, const T* x, size_t n) override {
    elementwise(n, 2, [&](size_t i, size_t m, float* s) {
      convert(x + i, s, m);
      f_.gelu_forward(s + m, s, m);
      convert(s + m, out + i, m);
    });
  }
  void gelu_backward(T* dx, const T* x, const T* dout, size_t n) override {
    binary(dx, x, dout, n, &KernelOps<float>::gelu_backward);
  }
  void residual_forward(T* out, const T* a, const T* b, size_t n) override {
    binary(out, a, b, n, &KernelOps<float>::residual_forward);
  }
  void accumulate(T* acc, const T* x, size_t n) override {
    elementwise(n, 2, [&](size_t i, size_t m, float* s) {
      convert(acc + i, s, m);
      convert(x + i, s + m, m);
      f_.accumulate(s, s + m, m);
      convert(s, acc + i, m);
    });
  }

  // Row by row. The loss sum is the rows' losses added in row order (rows_summed), not the fp32
  // kernel's per-tile totals, which group them by tile and thread: the same sum however the
  // rows are tiled, here and in classifier_forward_backward.
  void softmax_xent_forward(T* logits_to_probs, S* losses, const int32_t* targets, int rows, int V, double* loss_sum,
                            double weight) override {
    const size_t v = size_t(V);
    Tiles tiles(*this, size_t(rows), v, 0);
    float* p = tiles.take(v);
    double unused = 0;
    for (auto [r0, n] : tiles) {
      convert(logits_to_probs + r0 * v, p, n * v);
      f_.softmax_xent_forward(p, losses + r0, targets + r0, int(n), V, &unused, 1.0);
      convert(p, logits_to_probs + r0 * v, n * v);
    }
    *loss_sum += weight * rows_summed(losses, rows);
  }
  static double rows_summed(const S* losses, int rows) {
    double total = 0;
    for (int r = 0; r < rows; ++r) total += double(losses[r]);
    return total;
  }
  void softmax_xent_backward(T* probs_to_dlogits, const int32_t* targets, int rows, int V, double dloss) override {
    const size_t v = size_t(V);
    Tiles tiles(*this, size_t(rows), v, 0);
    float* p = tiles.take(v);
    for (auto [r0, n] : tiles) {
      convert(probs_to_dlogits + r0 * v, p, n * v);
      f_.softmax_xent_backward(p, targets + r0, int(n), V, dloss);
      convert(p, probs_to_dlogits + r0 * v, n * v);
    }
  }

  // The default's ops in the default's order, but the softmax's forward and backward run on each
  // tile of rows while it is in cache (each row is its own): the probabilities are stored in
  // bf16 and read back as the two ops would, bit for bit, while memory sees the logits read once
  // and dlogits written once, where the two ops' tiles, too large for a cache, passed over the
  // logits and their fp32 copies about a dozen times.
  void classifier_forward_backward(T* dx, G* dhead, T* logits, S* losses, const T* x, const T* head,
                                   const int32_t* targets, int rows, int C, int V, double* loss_sum, double weight,
                                   double dloss) override {
    linear_forward(logits, x, head, nullptr, rows, C, V);
    const size_t v = size_t(V);
    Tiles tiles(*this, size_t(rows), v, 0, kCacheTileFloats * size_t(omp_get_max_threads()));
    float* p = tiles.take(v);
    double unused = 0;
    for (auto [r0, n] : tiles) {
      T* l = logits + r0 * v;
      convert(l, p, n * v);
      f_.softmax_xent_forward(p, losses + r0, targets + r0, int(n), V, &unused, 1.0);
      convert(p, l, n * v);  // the probabilities, as softmax_xent_forward stores them
      convert(l, p, n * v);
      f_.softmax_xent_backward(p, targets + r0, int(n), V, dloss);
      convert(p, l, n * v);
    }
    *loss_sum += weight * rows_summed(losses, rows);
    linear_backward(dx, dhead, nullptr, logits, x, head, rows, C, V, false);
  }

  void rmsnorm_forward(T* out, S* rstd, const T* x, const T* weight, int rows, int C, double eps) override {
    const size_t c = size_t(C);
    Tiles tiles(*this, size_t(rows), 2 * c, c);
    const float* w = tiles.in(weight, c);
    float *xf = tiles.take(c), *o = tiles.take(c);
    for (auto [r0, n] : tiles) {
      convert(x + r0 * c, xf, n * c);
      f_.rmsnorm_forward(o, rstd + r0, xf, w, int(n), C, eps);
      convert(o, out + r0 * c, n * c);
    }
  }
  void rmsnorm_backward(T* dx, G* dweight, const T* dout, const T* x, const T* weight, const S* rstd, int rows,
                        int C) override {
    const size_t c = size_t(C);
    Tiles tiles(*this, size_t(rows), 3 * c, c);
    const float* w = tiles.in(weight, c);
    float *d = tiles.take(c), *g = tiles.take(c), *xf = tiles.take(c);
    for (auto [r0, n] : tiles) {
      convert(dx + r0 * c, d, n * c);  // dx +=
      convert(dout + r0 * c, g, n * c);
      convert(x + r0 * c, xf, n * c);
      f_.rmsnorm_backward(d, dweight, g, xf, w, rstd + r0, int(n), C);
      convert(d, dx + r0 * c, n * c);
    }
  }

  void rotary(T* x, const S* cos, const S* sin, int B, int T_, int heads, int hs, bool inverse) override {
    const size_t seq = size_t(T_) * size_t(heads) * size_t(hs);
    Tiles tiles(*this, size_t(B), seq, 0);
    float* v = tiles.take(seq);
    for (auto [b0, n] : tiles) {
      convert(x + b0 * seq, v, n * seq);
      f_.rotary(v, cos, sin, int(n), T_, heads, hs, inverse);
      convert(v, x + b0 * seq, n * seq);
    }
  }

  void gqa_attention_forward(T* out, S* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int NH,
                             int NKV, int hs) override {
    const size_t nq = size_t(Tq) * NH * hs, nkv = size_t(Tk) * NKV * hs;
    const AttentionShape shape{0, Tq, Tk, NH, NKV, hs, size_t(NH) * hs, size_t(NKV) * hs, size_t(NH) * hs};
    if (bf16_gemm_) return bf16_attention_forward(*bf16_gemm_, with_batch(shape, B), out, att, q, k, v);
    Tiles tiles(*this, size_t(B), 2 * nq + 2 * nkv, 0);
    float *o = tiles.take(nq), *qf = tiles.take(nq), *kf = tiles.take(nkv), *vf = tiles.take(nkv);
    for (auto [b0, n] : tiles) {
      convert(q + b0 * nq, qf, n * nq);
      convert(k + b0 * nkv, kf, n * nkv);
      convert(v + b0 * nkv, vf, n * nkv);
      lse_attention_forward(with_batch(shape, n), o, att + b0 * NH * Tq, qf, kf, vf);
      convert(o, out + b0 * nq, n * nq);
    }
  }
  void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* q, const T* k, const T* v,
                              const S* att, int B, int T_, int NH, int NKV, int hs) override {
    const size_t nq = size_t(T_) * NH * hs, nkv = size_t(T_) * NKV * hs;
    const AttentionShape shape{0, T_, T_, NH, NKV, hs, size_t(NH) * hs, size_t(NKV) * hs, size_t(NH) * hs};
    if (bf16_gemm_) {
      return bf16_attention_backward(*bf16_gemm_, with_batch(shape, B), dq, dk, dv, dout, out, q, k, v, att);
    }
    Tiles tiles(*this, size_t(B), 4 * nq + 4 * nkv, 0);
    float *gq = tiles.take(nq), *gk = tiles.take(nkv), *gv = tiles.take(nkv);
    float *g = tiles.take(nq), *o = tiles.take(nq), *qf = tiles.take(nq), *kf = tiles.take(nkv),
          *vf = tiles.take(nkv);
    for (auto [b0, n] : tiles) {
      convert(dout + b0 * nq, g, n * nq);
      convert(out + b0 * nq, o, n * nq);
      convert(q + b0 * nq, qf, n * nq);
      convert(k + b0 * nkv, kf, n * nkv);
      convert(v + b0 * nkv, vf, n * nkv);
      lse_attention_backward(with_batch(shape, n), gq, gk, gv, g, o, qf, kf, vf, att + b0 * NH * T_);
      convert(gq, dq + b0 * nq, n * nq);
      convert(gk, dk + b0 * nkv, n * nkv);
      convert(gv, dv + b0 * nkv, n * nkv);
    }
  }

  void swiglu_forward(T* out, const T* gate, const T* up, size_t n) override {
    binary(out, gate, up, n, &KernelOps<float>::swiglu_forward);
  }
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) override {
    elementwise(n, 5, [&](size_t i, size_t m, float* s) {
      convert(dout + i, s, m);
      convert(gate + i, s + m, m);
      convert(up + i, s + 2 * m, m);
      f_.swiglu_backward(s + 3 * m, s + 4 * m, s, s + m, s + 2 * m, m);
      convert(s + 3 * m, dgate + i, m);
      convert(s + 4 * m, dup + i, m);
    });
  }

 private:
  // One op's scratch, carved out of the table's arena (which grows to the largest op's and stays:
  // the shapes repeat every step), and the tiles of `units` pieces of per_unit floats beside
  // `fixed` floats that it walks: `for (auto [first, count] : tiles)`.
  class Tiles {
   public:
    Tiles(Bf16Kernels& k, size_t units, size_t per_unit, size_t fixed)
        : Tiles(k, units, per_unit, fixed, k.budget_) {}
    /// Tiles within `budget` floats (at most the kernels' own).
    Tiles(Bf16Kernels& k, size_t units, size_t per_unit, size_t fixed, size_t budget)
        : k_(k), units_(units), per_tile_(units_per_tile(units, per_unit, fixed, std::min(budget, k.budget_))),
          total_(fixed + per_tile_ * per_unit) {
      k.reserve(total_);
    }
    Tiles(const Tiles&) = delete;
    Tiles& operator=(const Tiles&) = delete;
    /// Room for one tile's `per_unit_floats` floats of an operand (or `fixed` ones: in()).
    float* take(size_t per_unit_floats) { return carve(per_unit_floats * per_tile_); }
    /// An fp32 copy of n bf16 values every tile reads (from `fixed`).
    const float* in(const bf16* p, size_t n) {
      float* f = carve(n);
      convert(p, f, n);
      return f;
    }
    struct Tile {
      size_t first, count;
    };
    struct Iterator {
      size_t at, step, end;
      Tile operator*() const { return {at, std::min(step, end - at)}; }
      Iterator& operator++() {
        at = std::min(end, at + step);
        return *this;
      }
      bool operator!=(const Iterator& o) const { return at != o.at; }
    };
    Iterator begin() const { return {0, per_tile_, units_}; }
    Iterator end() const { return {units_, per_tile_, units_}; }

   private:
    float* carve(size_t n) {
      ZT_CHECK(used_ + n <= total_, "bf16 kernels: an op took more scratch than it planned");
      float* f = k_.arena_.get() + used_;
      used_ += n;
      return f;
    }
    Bf16Kernels& k_;
    size_t units_, per_tile_, total_, used_ = 0;
  };

  // GPT-2's packed qkv [B, T, 3C] (q, k, v each C wide in a row of 3C) and out [B, T, C].
  static AttentionShape packed_shape(int T_, int C, int NH) {
    return {0, T_, T_, NH, NH, C / NH, 3 * size_t(C), 3 * size_t(C), size_t(C)};
  }
  static AttentionShape with_batch(AttentionShape s, size_t B) {
    s.B = int(B);
    return s;
  }

  void reserve(size_t floats) {
    if (floats <= arena_floats_) return;
    arena_.reset(new float[floats]);  // uninitialised: every use writes before it reads
    pool_counter(Pool::kDevice).add((floats - arena_floats_) * sizeof(float));
    arena_floats_ = floats;
  }

  // n elements of an op reading and writing `arrays` arrays, in tiles of whole 64-element blocks:
  // fn(first, count, scratch of arrays x count floats).
  template <typename Fn>
  void elementwise(size_t n, size_t arrays, Fn fn) {
    constexpr size_t kBlock = 64;
    const size_t blocks = (n + kBlock - 1) / kBlock;
    Tiles tiles(*this, blocks, arrays * kBlock, 0);
    float* s = tiles.take(arrays * kBlock);
    for (auto [b0, count] : tiles) {
      const size_t i = b0 * kBlock, m = std::min(n, (b0 + count) * kBlock) - i;
      fn(i, m, s);
    }
  }

  // out = op(a, b), elementwise.
  void binary(T* out, const T* a, const T* b, size_t n,
              void (KernelOps<float>::*op)(float*, const float*, const float*, size_t)) {
    elementwise(n, 3, [&](size_t i, size_t m, float* s) {
      convert(a + i, s, m);
      convert(b + i, s + m, m);
      (f_.*op)(s + 2 * m, s, s + m, m);
      convert(s + 2 * m, out + i, m);
    });
  }

  // C[M,N] (+)= op(A)[M,K] op(B)[K,N], A stored [M,K] (or [K,M] when ta), B stored [K,N] (or [N,K]
  // when tb), both bf16; into bf16 `cb` (rounded once; beta 1 adds to it; `bias` starts each row)
  // or in place into fp32 `cf` (beta 1 adds). In the tiles of plan_gemm.
  void gemm(bool ta, bool tb, int M_, int N_, int K_, const T* A, const T* B, float beta, T* cb, float* cf,
            const T* bias) {
    const size_t M = size_t(M_), N = size_t(N_), K = size_t(K_);
    // A bias starts C (the tiles below); oneDNN would add it to C: no caller asks for both.
    ZT_CHECK(!(bias && beta != 0.0f), "bf16 GEMM: a bias with beta ", beta);
    if (M == 0 || N == 0) return;
    if (bf16_gemm_) {  // oneDNN reads the bf16 operands as they lie: nothing widened, no scratch
      const int lda = ta ? M_ : K_, ldb = tb ? K_ : N_;
      if (cb) return bf16_gemm_->gemm(ta, tb, M_, N_, K_, A, lda, B, ldb, beta, cb, N_, bias);
      return bf16_gemm_->gemm(ta, tb, M_, N_, K_, A, lda, B, ldb, beta, cf, N_);
    }
    const bool c_scratch = cb != nullptr;
    const GemmTiles plan = plan_gemm(M, N, K, c_scratch, budget_);
    reserve(plan.floats(c_scratch));
    float *a = arena_.get(), *b = a + plan.mb * plan.kb, *c = b + plan.kb * plan.nb;
    const bool a_once = plan.mb == M && plan.kb == K;  // one tile of op(A): widened for the first only
    for (size_t n0 = 0; n0 < N; n0 += plan.nb) {
      const size_t nn = std::min(plan.nb, N - n0);
      for (size_t m0 = 0; m0 < M; m0 += plan.mb) {
        const size_t mm = std::min(plan.mb, M - m0);
        float* out = c;
        float b_eff = beta;
        if (!c_scratch) {
          out = cf + m0 * N;  // whole rows (plan_gemm: nb = N)
        } else if (bias) {
          for (size_t r = 0; r < mm; ++r) convert(bias + n0, c + r * nn, nn);
          b_eff = 1.0f;
        } else if (beta != 0.0f) {
          widen_block(cb, N, m0, mm, n0, nn, c);
        }
        for (size_t k0 = 0; k0 < K; k0 += plan.kb) {
          const size_t kk = std::min(plan.kb, K - k0);
          if (!a_once || n0 == 0) {
            if (ta) widen_block(A, M, k0, kk, m0, mm, a);  // op(A)'s block: A's [kk, mm]
            else widen_block(A, K, m0, mm, k0, kk, a);     // [mm, kk]
          }
          if (plan.kb < K || m0 == 0) {  // with K whole, one block of op(B) serves every row tile
            if (tb) widen_block(B, K, n0, nn, k0, kk, b);  // op(B)'s block: B's [nn, kk]
            else widen_block(B, N, k0, kk, n0, nn, b);     // [kk, nn]
          }
          sgemm(ta, tb, int(mm), int(nn), int(kk), a, b, k0 == 0 ? b_eff : 1.0f, out);
        }
        if (c_scratch) narrow_block(c, mm, nn, cb, N, m0, n0);
      }
    }
  }

  // A widened tile's GEMM (OpenBLAS). Contiguous operands, row-major.
  static void sgemm(bool ta, bool tb, int M, int N, int K, const float* A, const float* B, float beta, float* C) {
    cpu::gemm(ta, tb, M, N, K, 1.0f, A, B, beta, C);
  }

  // dbias += column sums of dout, as the fp32 kernels: split by column, rows added in order.
  static void column_sums_add(G* dbias, const T* dout, int rows, int cols) {
#pragma omp parallel
    {
      const int threads = omp_get_num_threads(), id = omp_get_thread_num();
      const int chunk = ((cols + threads - 1) / threads + 15) & ~15;
      const int c0 = std::min(cols, id * chunk), c1 = std::min(cols, c0 + chunk);
      for (int r = 0; r < rows; ++r) {
        const T* d = dout + size_t(r) * cols;
        for (int c = c0; c < c1; ++c) dbias[c] += to_float(d[c]);
      }
    }
  }

  std::unique_ptr<KernelOps<float>> own_;
  KernelOps<float>& f_;
  size_t budget_;
  Bf16Gemm* const in_place_;     // the GEMM on bf16 operands as they lie, where it is faster (or null)
  Bf16Gemm* bf16_gemm_ = nullptr;  // in_place_ while asked for bf16 GEMMs
  std::unique_ptr<float[]> arena_;
  size_t arena_floats_ = 0;
};

}  // namespace

std::unique_ptr<KernelOps<bf16>> make_bf16_kernels(std::unique_ptr<KernelOps<float>> f32, size_t scratch_floats,
                                                   Bf16Gemm* in_place) {
  return std::make_unique<Bf16Kernels>(std::move(f32), scratch_floats, in_place);
}

}  // namespace zt::cpu
