// KernelOps<bf16> on host memory by widening: each op converts its bf16 inputs to fp32 scratch,
// runs the fp32 kernel (the same code an fp32 run uses), and rounds each bf16 output once. Its
// parameter gradients and statistics are fp32 already (KernelTypes<bf16>) and pass straight
// through. This is a bf16 model's arithmetic exactly as a GPU's bf16 kernels do it (read bf16,
// compute in fp32, round the output), so the CPU and emulated backends test the bf16 activation
// path in CI; it is not a fast path: the widening costs a pass over memory, and fp32 scratch as
// large as the op's widened operands together (the largest op's: model_memory.h's
// widened_bf16_scratch_bytes), held from the first step on and counted in the device pool.
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/memory_pool.h"

namespace zt::cpu {

namespace {

class WidenedBf16Kernels final : public KernelOps<bf16> {
  using T = bf16;

 public:
  explicit WidenedBf16Kernels(std::unique_ptr<KernelOps<float>> f32) : own_(std::move(f32)), f_(*own_) {}
  ~WidenedBf16Kernels() override { pool_counter(Pool::kDevice).sub(arena_floats_ * sizeof(float)); }
  WidenedBf16Kernels(const WidenedBf16Kernels&) = delete;
  WidenedBf16Kernels& operator=(const WidenedBf16Kernels&) = delete;

  // GEMM inputs are bf16 values whatever is asked. Asked for bf16, the fp32 kernels (this
  // table's own) run their GEMMs through oneDNN's bf16 matmul where the CPU has bf16
  // instructions: on inputs that are bf16 values already that changes only the speed.
  DType set_matmul_dtype(DType dtype) override {
    f_.set_matmul_dtype(dtype);
    return DType::kBF16;
  }

  void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                         int C) override {
    // The table's rows up to the largest token are widened (a gather of just the rows in use
    // would need their own index).
    const size_t BT = size_t(B) * T_, rows = max_token_rows(tokens, BT), pos = wpe ? size_t(T_) : 0;
    Scratch s(*this, (BT + rows + pos) * C);
    float* o = s.out(BT * C);
    const float* w = s.in(wte, rows * C);
    f_.embedding_forward(o, tokens, w, wpe ? s.in(wpe, pos * C) : nullptr, B, T_, C);
    narrow(o, out, BT * C);
  }
  void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C) override {
    const size_t n = size_t(B) * T_ * C;
    Scratch s(*this, n);
    f_.embedding_backward(dwte, dwpe, s.in(dout, n), tokens, B, T_, C);
  }

  void layernorm_forward(T* out, S* mean, S* rstd, const T* x, const T* weight, const T* bias, int rows, int C,
                         double eps) override {
    const size_t n = size_t(rows) * C;
    Scratch s(*this, 2 * n + 2 * size_t(C));
    float* o = s.out(n);
    const float *xf = s.in(x, n), *w = s.in(weight, C);
    f_.layernorm_forward(o, mean, rstd, xf, w, s.in(bias, C), rows, C, eps);
    narrow(o, out, n);
  }
  void layernorm_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, const S* mean,
                          const S* rstd, int rows, int C) override {
    const size_t n = size_t(rows) * C;
    Scratch s(*this, 3 * n + size_t(C));
    float* d = s.inout(dx, n);  // dx +=
    const float *g = s.in(dout, n), *xf = s.in(x, n);
    f_.layernorm_backward(d, dweight, dbias, g, xf, s.in(weight, C), mean, rstd, rows, C);
    narrow(d, dx, n);
  }

  void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim, int out_dim) override {
    gemm_forward(out, x, weight, bias, rows, in_dim, out_dim, &KernelOps<float>::matmul_forward);
  }
  void matmul_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows, int in_dim,
                       int out_dim) override {
    const size_t n = size_t(rows) * in_dim, nout = size_t(rows) * out_dim, nw = size_t(in_dim) * out_dim;
    Scratch s(*this, (dx ? n : 0) + nout + n + nw);
    float* d = dx ? s.out(n) : nullptr;
    const float *g = s.in(dout, nout), *xf = s.in(x, n);
    f_.matmul_backward(d, dweight, dbias, g, xf, s.in(weight, nw), rows, in_dim, out_dim);
    if (dx) narrow(d, dx, n);
  }

  void attention_forward(T* out, S* att, const T* qkv, int B, int T_, int C, int NH) override {
    const size_t BT = size_t(B) * T_;
    Scratch s(*this, BT * 4 * C);
    float* o = s.out(BT * C);
    f_.attention_forward(o, att, s.in(qkv, BT * 3 * C), B, T_, C, NH);
    narrow(o, out, BT * C);
  }
  // The fp32 kernels keep the probabilities and never read the forward's out: it is not widened.
  void attention_backward(T* dqkv, const T* dout, const T*, const T* qkv, const S* att, int B, int T_, int C,
                          int NH) override {
    const size_t BT = size_t(B) * T_;
    Scratch s(*this, BT * 7 * C);
    float* d = s.out(BT * 3 * C);
    const float* g = s.in(dout, BT * C);
    f_.attention_backward(d, g, nullptr, s.in(qkv, BT * 3 * C), att, B, T_, C, NH);
    narrow(d, dqkv, BT * 3 * C);
  }

  void gelu_forward(T* out, const T* x, size_t n) override { unary(out, x, n, &KernelOps<float>::gelu_forward); }
  void gelu_backward(T* dx, const T* x, const T* dout, size_t n) override {
    binary(dx, x, dout, n, &KernelOps<float>::gelu_backward);
  }
  void residual_forward(T* out, const T* a, const T* b, size_t n) override {
    binary(out, a, b, n, &KernelOps<float>::residual_forward);
  }
  void accumulate(T* acc, const T* x, size_t n) override {
    Scratch s(*this, 2 * n);
    float* a = s.inout(acc, n);
    f_.accumulate(a, s.in(x, n), n);
    narrow(a, acc, n);
  }

  void softmax_xent_forward(T* logits_to_probs, S* losses, const int32_t* targets, int rows, int V, double* loss_sum,
                            double weight) override {
    const size_t n = size_t(rows) * V;
    Scratch s(*this, n);
    float* p = s.inout(logits_to_probs, n);
    f_.softmax_xent_forward(p, losses, targets, rows, V, loss_sum, weight);
    narrow(p, logits_to_probs, n);
  }
  void softmax_xent_backward(T* probs_to_dlogits, const int32_t* targets, int rows, int V, double dloss) override {
    const size_t n = size_t(rows) * V;
    Scratch s(*this, n);
    float* p = s.inout(probs_to_dlogits, n);
    f_.softmax_xent_backward(p, targets, rows, V, dloss);
    narrow(p, probs_to_dlogits, n);
  }

  void linear_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim, int out_dim) override {
    gemm_forward(out, x, weight, bias, rows, in_dim, out_dim, &KernelOps<float>::linear_forward);
  }
  void linear_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows, int in_dim,
                       int out_dim, bool accumulate_dx) override {
    const size_t n = size_t(rows) * in_dim, nout = size_t(rows) * out_dim, nw = size_t(out_dim) * in_dim;
    Scratch s(*this, (dx ? n : 0) + nout + n + nw);
    float* d = !dx ? nullptr : accumulate_dx ? s.inout(dx, n) : s.out(n);
    const float *g = s.in(dout, nout), *xf = s.in(x, n);
    f_.linear_backward(d, dweight, dbias, g, xf, s.in(weight, nw), rows, in_dim, out_dim, accumulate_dx);
    if (dx) narrow(d, dx, n);
  }

  void rmsnorm_forward(T* out, S* rstd, const T* x, const T* weight, int rows, int C, double eps) override {
    const size_t n = size_t(rows) * C;
    Scratch s(*this, 2 * n + size_t(C));
    float* o = s.out(n);
    const float* xf = s.in(x, n);
    f_.rmsnorm_forward(o, rstd, xf, s.in(weight, C), rows, C, eps);
    narrow(o, out, n);
  }
  void rmsnorm_backward(T* dx, G* dweight, const T* dout, const T* x, const T* weight, const S* rstd, int rows,
                        int C) override {
    const size_t n = size_t(rows) * C;
    Scratch s(*this, 3 * n + size_t(C));
    float* d = s.inout(dx, n);  // dx +=
    const float *g = s.in(dout, n), *xf = s.in(x, n);
    f_.rmsnorm_backward(d, dweight, g, xf, s.in(weight, C), rstd, rows, C);
    narrow(d, dx, n);
  }

  void rotary(T* x, const S* cos, const S* sin, int B, int T_, int heads, int hs, bool inverse) override {
    const size_t n = size_t(B) * T_ * heads * hs;
    Scratch s(*this, n);
    float* v = s.inout(x, n);
    f_.rotary(v, cos, sin, B, T_, heads, hs, inverse);
    narrow(v, x, n);
  }

  void gqa_attention_forward(T* out, S* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int NH,
                             int NKV, int hs) override {
    const size_t nq = size_t(B) * Tq * NH * hs, nkv = size_t(B) * Tk * NKV * hs;
    Scratch s(*this, 2 * nq + 2 * nkv);
    float* o = s.out(nq);
    const float *qf = s.in(q, nq), *kf = s.in(k, nkv);
    f_.gqa_attention_forward(o, att, qf, kf, s.in(v, nkv), B, Tq, Tk, NH, NKV, hs);
    narrow(o, out, nq);
  }
  void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T*, const T* q, const T* k, const T* v,
                              const S* att, int B, int T_, int NH, int NKV, int hs) override {
    const size_t nq = size_t(B) * T_ * NH * hs, nkv = size_t(B) * T_ * NKV * hs;
    Scratch s(*this, 3 * nq + 4 * nkv);
    float *gq = s.out(nq), *gk = s.out(nkv), *gv = s.out(nkv);
    const float *g = s.in(dout, nq), *qf = s.in(q, nq), *kf = s.in(k, nkv);
    f_.gqa_attention_backward(gq, gk, gv, g, nullptr, qf, kf, s.in(v, nkv), att, B, T_, NH, NKV, hs);
    narrow(gq, dq, nq);
    narrow(gk, dk, nkv);
    narrow(gv, dv, nkv);
  }

  void swiglu_forward(T* out, const T* gate, const T* up, size_t n) override {
    binary(out, gate, up, n, &KernelOps<float>::swiglu_forward);
  }
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) override {
    Scratch s(*this, 5 * n);
    float *dg = s.out(n), *du = s.out(n);
    const float *g = s.in(dout, n), *a = s.in(gate, n);
    f_.swiglu_backward(dg, du, g, a, s.in(up, n), n);
    narrow(dg, dgate, n);
    narrow(du, dup, n);
  }

 private:
  // The fp32 copies of one op's operands, carved in turn out of the table's arena, which grows to
  // the largest op's total (the shapes repeat every step: it grows in the first only). The
  // arena's bytes count in the device pool: on the CPU that is the memory standing in for it.
  class Scratch {
   public:
    /// Room for `total` floats of operands.
    Scratch(WidenedBf16Kernels& k, size_t total) : k_(k), total_(total) { k.reserve(total); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    /// An fp32 copy of n bf16 values.
    const float* in(const bf16* p, size_t n) {
      float* f = take(n);
      convert(p, f, n);
      return f;
    }
    /// An fp32 buffer for an output the op overwrites.
    float* out(size_t n) { return take(n); }
    /// An fp32 copy of an output the op adds to or updates in place.
    float* inout(const bf16* p, size_t n) { return const_cast<float*>(in(p, n)); }

   private:
    float* take(size_t n) {
      ZT_CHECK(used_ + n <= total_, "widened bf16 kernels: an op asked for more scratch than it declared");
      float* f = k_.arena_.get() + used_;
      used_ += n;
      return f;
    }
    WidenedBf16Kernels& k_;
    size_t total_, used_ = 0;
  };

  void reserve(size_t floats) {
    if (floats <= arena_floats_) return;
    // Uninitialised: every use writes before it reads.
    arena_.reset(new float[floats]);
    pool_counter(Pool::kDevice).add((floats - arena_floats_) * sizeof(float));
    arena_floats_ = floats;
  }

  static void narrow(const float* src, bf16* dst, size_t n) { convert(src, dst, n); }

  // The embedding rows a batch reads: up to its largest token.
  static size_t max_token_rows(const int32_t* tokens, size_t n) {
    int32_t m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, tokens[i]);
    return size_t(m) + 1;
  }

  void unary(T* out, const T* x, size_t n, void (KernelOps<float>::*op)(float*, const float*, size_t)) {
    Scratch s(*this, 2 * n);
    float* o = s.out(n);
    (f_.*op)(o, s.in(x, n), n);
    narrow(o, out, n);
  }
  void binary(T* out, const T* a, const T* b, size_t n,
              void (KernelOps<float>::*op)(float*, const float*, const float*, size_t)) {
    Scratch s(*this, 3 * n);
    float* o = s.out(n);
    const float* af = s.in(a, n);
    (f_.*op)(o, af, s.in(b, n), n);
    narrow(o, out, n);
  }
  // matmul_forward and linear_forward: the same operands, the weight's layout aside.
  void gemm_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim, int out_dim,
                    void (KernelOps<float>::*op)(float*, const float*, const float*, const float*, int, int, int)) {
    const size_t n = size_t(rows) * out_dim, nx = size_t(rows) * in_dim, nw = size_t(in_dim) * out_dim;
    Scratch s(*this, n + nx + nw + (bias ? size_t(out_dim) : 0));
    float* o = s.out(n);
    const float *xf = s.in(x, nx), *w = s.in(weight, nw);
    (f_.*op)(o, xf, w, bias ? s.in(bias, out_dim) : nullptr, rows, in_dim, out_dim);
    narrow(o, out, n);
  }

  std::unique_ptr<KernelOps<float>> own_;
  KernelOps<float>& f_;
  std::unique_ptr<float[]> arena_;
  size_t arena_floats_ = 0;
};

}  // namespace

std::unique_ptr<KernelOps<bf16>> make_widened_bf16_kernels(std::unique_ptr<KernelOps<float>> f32) {
  return std::make_unique<WidenedBf16Kernels>(std::move(f32));
}

}  // namespace zt::cpu
