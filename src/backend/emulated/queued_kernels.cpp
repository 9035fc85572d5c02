// KernelOps and OptimizerOps for the emulated backend: each call declares the bytes its arguments
// span (shapes as kernel_ops.h documents them) and runs the CPU kernel on the compute stream.
#include "backend/emulated/emulated_backend.h"

namespace zt::emulated {

namespace {

template <typename T>
Access in(const T* p, size_t n) {
  return {p, n * sizeof(T), false};
}
template <typename T>
Access out(T* p, size_t n) {
  return {p, n * sizeof(T), true};
}
// Arguments that may be null (no bias, no dx): no access.
template <typename T>
void maybe(std::vector<Access>& v, T* p, size_t n, bool write) {
  if (p) v.push_back({p, n * sizeof(T), write});
}

template <typename T>
class QueuedKernels final : public KernelOps<T> {
  using G = GradOf<T>;
  using S = StatOf<T>;

 public:
  QueuedKernels(ComputeQueue& q, KernelOps<T>& k) : q_(q), k_(k) {}

  // A setting, not work: it applies to the kernels enqueued after it (set before a run starts).
  DType set_matmul_dtype(DType dtype) override { return k_.set_matmul_dtype(dtype); }
  bool set_allow_tf32(bool allow) override { return k_.set_allow_tf32(allow); }
  bool set_batch_invariant(bool on) override { return k_.set_batch_invariant(on); }
  // No weight packs (the default's false): kStale is not work, so it would reach the CPU table
  // before the GEMMs still queued ahead of it, which could pack weights about to change.
  bool attention_saves_lse() const override { return k_.attention_saves_lse(); }
  int logits_stride(int V) const override { return k_.logits_stride(V); }
  void classifier_forward(T* logits, S* losses, const T* x, const T* head, const int32_t* targets, int rows, int C,
                          int V, double* loss_sum, double weight) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("classifier_forward",
                       {out(logits, R * size_t(k_.logits_stride(V))), out(losses, R), in(x, R * C),
                        in(head, size_t(V) * C), in(targets, R), out(loss_sum, 1)},
                       [=, this] { k_.classifier_forward(logits, losses, x, head, targets, rows, C, V, loss_sum, weight); });
  }
  void classifier_backward(T* dx, G* dhead, T* logits, const T* x, const T* head, const int32_t* targets, int rows,
                           int C, int V, double dloss) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("classifier_backward",
                       {out(dx, R * C), out(dhead, size_t(V) * C), out(logits, R * size_t(k_.logits_stride(V))),
                        in(x, R * C), in(head, size_t(V) * C), in(targets, R)},
                       [=, this] { k_.classifier_backward(dx, dhead, logits, x, head, targets, rows, C, V, dloss); });
  }
  void classifier_forward_backward(T* dx, G* dhead, T* logits, S* losses, const T* x, const T* head,
                                   const int32_t* targets, int rows, int C, int V, double* loss_sum, double weight,
                                   double dloss) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("classifier_forward_backward",
                       {out(dx, R * C), out(dhead, size_t(V) * C), out(logits, R * size_t(k_.logits_stride(V))),
                        out(losses, R), in(x, R * C), in(head, size_t(V) * C), in(targets, R), out(loss_sum, 1)},
                       [=, this] {
                         k_.classifier_forward_backward(dx, dhead, logits, losses, x, head, targets, rows, C, V,
                                                        loss_sum, weight, dloss);
                       });
  }

  void embedding_forward(T* o, const int32_t* tok, const T* wte, const T* wpe, int B, int T_, int C) override {
    const size_t BT = size_t(B) * T_;
    std::vector<Access> a{out(o, BT * C), in(tok, BT), {wte, kToEnd, false}};
    maybe(a, wpe, size_t(T_) * C, false);  // null: no learned positions
    q_.enqueue_compute("embedding_forward", std::move(a),
                       [=, this] { k_.embedding_forward(o, tok, wte, wpe, B, T_, C); });
  }
  void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tok, int B, int T_, int C) override {
    const size_t BT = size_t(B) * T_;
    std::vector<Access> a{{dwte, kToEnd, true}, in(dout, BT * C), in(tok, BT)};
    maybe(a, dwpe, size_t(T_) * C, true);
    q_.enqueue_compute("embedding_backward", std::move(a),
                       [=, this] { k_.embedding_backward(dwte, dwpe, dout, tok, B, T_, C); });
  }
  void layernorm_forward(T* o, S* mean, S* rstd, const T* x, const T* w, const T* b, int rows, int C,
                         double eps) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("layernorm_forward",
                       {out(o, R * C), out(mean, R), out(rstd, R), in(x, R * C), in(w, size_t(C)), in(b, size_t(C))},
                       [=, this] { k_.layernorm_forward(o, mean, rstd, x, w, b, rows, C, eps); });
  }
  void layernorm_backward(T* dx, G* dw, G* db, const T* dout, const T* x, const T* w, const S* mean, const S* rstd,
                          int rows, int C) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("layernorm_backward",
                       {out(dx, R * C), out(dw, size_t(C)), out(db, size_t(C)), in(dout, R * C), in(x, R * C),
                        in(w, size_t(C)), in(mean, R), in(rstd, R)},
                       [=, this] { k_.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, rows, C); });
  }
  void matmul_forward(T* o, const T* x, const T* w, const T* b, int rows, int in_dim, int out_dim) override {
    std::vector<Access> a{out(o, size_t(rows) * out_dim), in(x, size_t(rows) * in_dim),
                          in(w, size_t(in_dim) * out_dim)};
    maybe(a, b, size_t(out_dim), false);
    q_.enqueue_compute("matmul_forward", std::move(a),
                       [=, this] { k_.matmul_forward(o, x, w, b, rows, in_dim, out_dim); });
  }
  void matmul_backward(T* dx, G* dw, G* db, const T* dout, const T* x, const T* w, int rows, int in_dim,
                       int out_dim) override {
    std::vector<Access> a{out(dw, size_t(in_dim) * out_dim), in(dout, size_t(rows) * out_dim),
                          in(x, size_t(rows) * in_dim), in(w, size_t(in_dim) * out_dim)};
    maybe(a, dx, size_t(rows) * in_dim, true);
    maybe(a, db, size_t(out_dim), true);
    q_.enqueue_compute("matmul_backward", std::move(a),
                       [=, this] { k_.matmul_backward(dx, dw, db, dout, x, w, rows, in_dim, out_dim); });
  }
  void attention_forward(T* o, S* att, const T* qkv, int B, int T_, int C, int NH) override {
    const size_t BT = size_t(B) * T_;
    q_.enqueue_compute("attention_forward",
                       {out(o, BT * C), out(att, att_elems(B, NH, T_, T_)), in(qkv, BT * 3 * C)},
                       [=, this] { k_.attention_forward(o, att, qkv, B, T_, C, NH); });
  }
  void attention_backward(T* dqkv, const T* dout, const T* o, const T* qkv, const S* att, int B, int T_, int C,
                          int NH) override {
    const size_t BT = size_t(B) * T_;
    q_.enqueue_compute("attention_backward",
                       {out(dqkv, BT * 3 * C), in(dout, BT * C), in(o, BT * C), in(qkv, BT * 3 * C),
                        in(att, att_elems(B, NH, T_, T_))},
                       [=, this] { k_.attention_backward(dqkv, dout, o, qkv, att, B, T_, C, NH); });
  }
  void gelu_forward(T* o, const T* x, size_t n) override {
    q_.enqueue_compute("gelu_forward", {out(o, n), in(x, n)}, [=, this] { k_.gelu_forward(o, x, n); });
  }
  void gelu_backward(T* dx, const T* x, const T* dout, size_t n) override {
    q_.enqueue_compute("gelu_backward", {out(dx, n), in(x, n), in(dout, n)},
                       [=, this] { k_.gelu_backward(dx, x, dout, n); });
  }
  void residual_forward(T* o, const T* a, const T* b, size_t n) override {
    q_.enqueue_compute("residual_forward", {out(o, n), in(a, n), in(b, n)},
                       [=, this] { k_.residual_forward(o, a, b, n); });
  }
  void accumulate(T* acc, const T* x, size_t n) override {
    q_.enqueue_compute("accumulate", {out(acc, n), in(x, n)}, [=, this] { k_.accumulate(acc, x, n); });
  }
  void softmax_xent_forward(T* logits, S* losses, const int32_t* targets, int rows, int V, double* loss_sum,
                            double weight) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("softmax_xent_forward",
                       {out(logits, R * V), out(losses, R), in(targets, R), out(loss_sum, 1)},
                       [=, this] { k_.softmax_xent_forward(logits, losses, targets, rows, V, loss_sum, weight); });
  }
  void softmax_xent_backward(T* probs, const int32_t* targets, int rows, int V, double dloss) override {
    q_.enqueue_compute("softmax_xent_backward", {out(probs, size_t(rows) * V), in(targets, size_t(rows))},
                       [=, this] { k_.softmax_xent_backward(probs, targets, rows, V, dloss); });
  }
  void linear_forward(T* o, const T* x, const T* w, const T* b, int rows, int in_dim, int out_dim) override {
    std::vector<Access> a{out(o, size_t(rows) * out_dim), in(x, size_t(rows) * in_dim),
                          in(w, size_t(out_dim) * in_dim)};
    maybe(a, b, size_t(out_dim), false);
    q_.enqueue_compute("linear_forward", std::move(a),
                       [=, this] { k_.linear_forward(o, x, w, b, rows, in_dim, out_dim); });
  }
  void linear_backward(T* dx, G* dw, G* db, const T* dout, const T* x, const T* w, int rows, int in_dim, int out_dim,
                       bool accumulate_dx) override {
    std::vector<Access> a{out(dw, size_t(out_dim) * in_dim), in(dout, size_t(rows) * out_dim),
                          in(x, size_t(rows) * in_dim), in(w, size_t(out_dim) * in_dim)};
    maybe(a, dx, size_t(rows) * in_dim, true);
    maybe(a, db, size_t(out_dim), true);
    q_.enqueue_compute("linear_backward", std::move(a), [=, this] {
      k_.linear_backward(dx, dw, db, dout, x, w, rows, in_dim, out_dim, accumulate_dx);
    });
  }
  void rmsnorm_forward(T* o, S* rstd, const T* x, const T* w, int rows, int C, double eps) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("rmsnorm_forward", {out(o, R * C), out(rstd, R), in(x, R * C), in(w, size_t(C))},
                       [=, this] { k_.rmsnorm_forward(o, rstd, x, w, rows, C, eps); });
  }
  void rmsnorm_backward(T* dx, G* dw, const T* dout, const T* x, const T* w, const S* rstd, int rows, int C) override {
    const size_t R = size_t(rows);
    q_.enqueue_compute("rmsnorm_backward",
                       {out(dx, R * C), out(dw, size_t(C)), in(dout, R * C), in(x, R * C), in(w, size_t(C)),
                        in(rstd, R)},
                       [=, this] { k_.rmsnorm_backward(dx, dw, dout, x, w, rstd, rows, C); });
  }
  void rotary(T* x, const S* cos, const S* sin, int B, int T_, int heads, int hs, bool inverse) override {
    const size_t angles = size_t(T_) * (hs / 2);
    q_.enqueue_compute("rotary", {out(x, size_t(B) * T_ * heads * hs), in(cos, angles), in(sin, angles)},
                       [=, this] { k_.rotary(x, cos, sin, B, T_, heads, hs, inverse); });
  }
  void gqa_attention_forward(T* o, S* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int NH, int NKV,
                             int hs) override {
    const size_t q_n = size_t(B) * Tq * NH * hs, kv_n = size_t(B) * Tk * NKV * hs;
    q_.enqueue_compute("gqa_attention_forward",
                       {out(o, q_n), out(att, att_elems(B, NH, Tq, Tk)), in(q, q_n), in(k, kv_n), in(v, kv_n)},
                       [=, this] { k_.gqa_attention_forward(o, att, q, k, v, B, Tq, Tk, NH, NKV, hs); });
  }
  void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* o, const T* q, const T* k, const T* v,
                              const S* att, int B, int T_, int NH, int NKV, int hs) override {
    const size_t q_n = size_t(B) * T_ * NH * hs, kv_n = size_t(B) * T_ * NKV * hs;
    q_.enqueue_compute("gqa_attention_backward",
                       {out(dq, q_n), out(dk, kv_n), out(dv, kv_n), in(dout, q_n), in(o, q_n), in(q, q_n),
                        in(k, kv_n), in(v, kv_n), in(att, att_elems(B, NH, T_, T_))},
                       [=, this] {
                         k_.gqa_attention_backward(dq, dk, dv, dout, o, q, k, v, att, B, T_, NH, NKV, hs);
                       });
  }
  void swiglu_forward(T* o, const T* gate, const T* up, size_t n) override {
    q_.enqueue_compute("swiglu_forward", {out(o, n), in(gate, n), in(up, n)},
                       [=, this] { k_.swiglu_forward(o, gate, up, n); });
  }
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) override {
    q_.enqueue_compute("swiglu_backward", {out(dgate, n), out(dup, n), in(dout, n), in(gate, n), in(up, n)},
                       [=, this] { k_.swiglu_backward(dgate, dup, dout, gate, up, n); });
  }

 private:
  // What attention saves: the probabilities, or each row's logsumexp.
  size_t att_elems(int B, int NH, int Tq, int Tk) const {
    return size_t(B) * NH * Tq * (k_.attention_saves_lse() ? 1 : size_t(Tk));
  }

  ComputeQueue& q_;
  KernelOps<T>& k_;
};

Access in_raw(const void* p, DType t, size_t n) { return {p, n * dtype_size(t), false}; }
Access out_raw(void* p, DType t, size_t n) { return {p, n * dtype_size(t), true}; }

class QueuedOptimizerOps final : public OptimizerOps {
 public:
  QueuedOptimizerOps(ComputeQueue& q, OptimizerOps& k) : q_(q), k_(k) {}

  void adam_step(const OptimizerStepArgs& args, float* master, float* m, float* v, const void* grad, DType gt, void* param,
                 DType pt, size_t n) override {
    std::vector<Access> a{out(m, n), out(v, n), in_raw(grad, gt, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    q_.enqueue_compute("adam_step", std::move(a),
                       [=, this] { k_.adam_step(args, master, m, v, grad, gt, param, pt, n); });
  }
  void lion_step(const OptimizerStepArgs& args, float* master, float* m, const void* grad, DType gt, void* param,
                 DType pt, size_t n) override {
    std::vector<Access> a{out(m, n), in_raw(grad, gt, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    q_.enqueue_compute("lion_step", std::move(a),
                       [=, this] { k_.lion_step(args, master, m, grad, gt, param, pt, n); });
  }
  void adagrad_step(const OptimizerStepArgs& args, float* master, float* v, const void* grad, DType gt, void* param,
                    DType pt, size_t n) override {
    std::vector<Access> a{out(v, n), in_raw(grad, gt, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    q_.enqueue_compute("adagrad_step", std::move(a),
                       [=, this] { k_.adagrad_step(args, master, v, grad, gt, param, pt, n); });
  }
  void lamb_moments(const OptimizerStepArgs& args, const float* master, float* m, float* v, const void* grad, DType gt,
                    size_t n, double* sums) override {
    q_.enqueue_compute("lamb_moments", {in(master, n), out(m, n), out(v, n), in_raw(grad, gt, n), out(sums, 2)},
                       [=, this] { k_.lamb_moments(args, master, m, v, grad, gt, n, sums); });
  }
  void lamb_apply(const OptimizerStepArgs& args, float trust_ratio, float* master, const float* m, const float* v,
                  void* param, DType pt, size_t n) override {
    std::vector<Access> a{in(m, n), in(v, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    q_.enqueue_compute("lamb_apply", std::move(a),
                       [=, this] { k_.lamb_apply(args, trust_ratio, master, m, v, param, pt, n); });
  }
  void muon_momentum(const OptimizerStepArgs& args, float* m, const void* grad, DType gt, float* update,
                     size_t n) override {
    q_.enqueue_compute("muon_momentum", {out(m, n), in_raw(grad, gt, n), out(update, n)},
                       [=, this] { k_.muon_momentum(args, m, grad, gt, update, n); });
  }
  void muon_apply(const OptimizerStepArgs& args, float* master, const float* update, void* param, DType pt,
                  size_t n) override {
    std::vector<Access> a{in(update, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    q_.enqueue_compute("muon_apply", std::move(a),
                       [=, this] { k_.muon_apply(args, master, update, param, pt, n); });
  }
  void onebit_momentum_sums(const OptimizerStepArgs& args, float* m, const void* grad, DType gt, size_t n,
                            const float* error, size_t padded, double* sum) override {
    std::vector<Access> a{out(m, n), out(sum, 1)};
    if (grad) a.push_back(in_raw(grad, gt, n));
    if (error) a.push_back(in(error, padded));
    q_.enqueue_compute("onebit_momentum_sums", std::move(a),
                       [=, this] { k_.onebit_momentum_sums(args, m, grad, gt, n, error, padded, sum); });
  }
  void onebit_server_sums(const SignBlocks& in_blocks, float* error, double* sum) override {
    std::vector<Access> a{out(error, in_blocks.chunk), out(sum, 1)};
    add_blocks(a, in_blocks, false);
    q_.enqueue_compute("onebit_server_sums", std::move(a), [=, this] { k_.onebit_server_sums(in_blocks, error, sum); });
  }
  void onebit_compress(const float* x, size_t n, float* error, size_t padded, const double* sum,
                       const SignBlocks& out_blocks) override {
    std::vector<Access> a{out(error, padded), in(sum, 1)};
    if (x) a.push_back(in(x, n));
    add_blocks(a, out_blocks, true);
    q_.enqueue_compute("onebit_compress", std::move(a),
                       [=, this] { k_.onebit_compress(x, n, error, padded, sum, out_blocks); });
  }
  void onebit_apply(const OptimizerStepArgs& args, float* master, float* m, const float* v, const SignBlocks& in_blocks,
                    void* param, DType pt, size_t n) override {
    std::vector<Access> a{out(m, n), in(v, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    if (in_blocks.words) add_blocks(a, in_blocks, false);
    q_.enqueue_compute("onebit_apply", std::move(a),
                       [=, this] { k_.onebit_apply(args, master, m, v, in_blocks, param, pt, n); });
  }
  void onebit_lamb_momentum(const OptimizerStepArgs& args, float scale, const float* m, const void* grad, DType gt,
                            float* x, size_t n) override {
    q_.enqueue_compute("onebit_lamb_momentum", {in(m, n), in_raw(grad, gt, n), out(x, n)},
                       [=, this] { k_.onebit_lamb_momentum(args, scale, m, grad, gt, x, n); });
  }
  void onebit_decompress(const SignBlocks& in_blocks, float* x, size_t n) override {
    std::vector<Access> a{out(x, n)};
    add_blocks(a, in_blocks, false);
    q_.enqueue_compute("onebit_decompress", std::move(a), [=, this] { k_.onebit_decompress(in_blocks, x, n); });
  }
  void onebit_lamb_stats(const OptimizerStepArgs& args, float scale, const float* master, float* m, const float* v,
                         float* f, const float* x, size_t n, double* sums) override {
    q_.enqueue_compute("onebit_lamb_stats",
                       {in(master, n), out(m, n), in(v, n), out(f, n), in(x, n), out(sums, 3)},
                       [=, this] { k_.onebit_lamb_stats(args, scale, master, m, v, f, x, n, sums); });
  }
  void zero_one_pass(const ZeroOneArgs& z, const OptimizerStepArgs& args, float* master, float* m, const float* v,
                     float* u, const void* grad, DType gt, const SignBlocks& in_blocks, void* param, DType pt,
                     size_t n) override {
    std::vector<Access> a{out(m, n), in(v, n), out(u, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    if (grad) a.push_back(in_raw(grad, gt, n));
    if (in_blocks.words) add_blocks(a, in_blocks, false);
    q_.enqueue_compute("zero_one_pass", std::move(a), [=, this] {
      k_.zero_one_pass(z, args, master, m, v, u, grad, gt, in_blocks, param, pt, n);
    });
  }
  void adafactor_sums(const OptimizerStepArgs& args, const void* grad, DType gt, size_t n, size_t first, size_t cols,
                      float* row_sums, float* col_sums) override {
    if (n == 0) return;
    const MatrixSpan s = matrix_span(first, n, cols);
    q_.enqueue_compute("adafactor_sums",
                       {in_raw(grad, gt, n), out(row_sums + s.row0, s.rows), out(col_sums + s.col0, s.cols)},
                       [=, this] { k_.adafactor_sums(args, grad, gt, n, first, cols, row_sums, col_sums); });
  }
  void adafactor_factors(const OptimizerStepArgs& args, float* row, float* col, const float* row_sums,
                         const float* col_sums, size_t rows, size_t cols, float* scaled_row) override {
    q_.enqueue_compute("adafactor_factors",
                       {out(row, rows), out(col, cols), in(row_sums, rows), in(col_sums, cols), out(scaled_row, rows)},
                       [=, this] { k_.adafactor_factors(args, row, col, row_sums, col_sums, rows, cols, scaled_row); });
  }
  void adafactor_norms(const OptimizerStepArgs& args, const float* master, const AdafactorMoment& v, const void* grad,
                       DType gt, size_t n, double* sums) override {
    std::vector<Access> a{in_raw(grad, gt, n), out(sums, 2)};
    if (master) a.push_back(in(master, n));
    add_moment(a, v, n, true);
    q_.enqueue_compute("adafactor_norms", std::move(a),
                       [=, this] { k_.adafactor_norms(args, master, v, grad, gt, n, sums); });
  }
  void adafactor_apply(const OptimizerStepArgs& args, float scale, float decay, float* master, float* m,
                       const AdafactorMoment& v, const void* grad, DType gt, void* param, DType pt,
                       size_t n) override {
    std::vector<Access> a{in_raw(grad, gt, n), out_raw(param, pt, n)};
    if (static_cast<void*>(master) != param) a.push_back(out(master, n));
    if (m) a.push_back(out(m, n));
    add_moment(a, v, n, false);
    q_.enqueue_compute("adafactor_apply", std::move(a), [=, this] {
      k_.adafactor_apply(args, scale, decay, master, m, v, grad, gt, param, pt, n);
    });
  }
  void axpby(float* y, float a, const float* x, float b, size_t n) override {
    std::vector<Access> acc{out(y, n)};
    if (x != y) acc.push_back(in(x, n));
    q_.enqueue_compute("axpby", std::move(acc), [=, this] { k_.axpby(y, a, x, b, n); });
  }
  void scale_by_inverse_norm(float* x, size_t n, const double* sum_sq, float eps) override {
    q_.enqueue_compute("scale_by_inverse_norm", {out(x, n), in(sum_sq, 1)},
                       [=, this] { k_.scale_by_inverse_norm(x, n, sum_sq, eps); });
  }
  void add_diagonal(float* x, size_t n, float a) override {
    q_.enqueue_compute("add_diagonal", {out(x, n * n)}, [=, this] { k_.add_diagonal(x, n, a); });
  }
  void sum_squares(const void* data, DType t, size_t n, double* result) override {
    q_.enqueue_compute("sum_squares", {in_raw(data, t, n), out(result, 1)},
                       [=, this] { k_.sum_squares(data, t, n, result); });
  }
  void accumulate_into(void* acc, DType at, const void* x, DType xt, size_t n) override {
    q_.enqueue_compute("accumulate_into", {out_raw(acc, at, n), in_raw(x, xt, n)},
                       [=, this] { k_.accumulate_into(acc, at, x, xt, n); });
  }
  void quantize(const void* x, DType t, size_t n, size_t block, int bits, void* q, float* scales) override {
    const size_t bytes = (n * size_t(bits) + 7) / 8;
    q_.enqueue_compute("quantize", {in_raw(x, t, n), {q, bytes, true}, out(scales, (n + block - 1) / block)},
                       [=, this] { k_.quantize(x, t, n, block, bits, q, scales); });
  }
  void dequantize(const void* q, const float* scales, size_t n, size_t block, int bits, void* x, DType t) override {
    const size_t bytes = (n * size_t(bits) + 7) / 8;
    q_.enqueue_compute("dequantize", {{q, bytes, false}, in(scales, (n + block - 1) / block), out_raw(x, t, n)},
                       [=, this] { k_.dequantize(q, scales, n, block, bits, x, t); });
  }
  void zero(void* data, DType t, size_t n) override {
    q_.enqueue_compute("zero", {out_raw(data, t, n)}, [=, this] { k_.zero(data, t, n); });
  }

 private:
  // The second moment an Adafactor pass reads (and, for a 1-D tensor's norms pass, writes).
  void add_moment(std::vector<Access>& a, const AdafactorMoment& v, size_t n, bool writes) {
    if (!v.factored()) {
      a.push_back(writes ? out(v.exp_avg_sq, n) : in(v.exp_avg_sq, n));
      return;
    }
    if (n == 0) return;
    const MatrixSpan s = matrix_span(v.first, n, v.cols);
    a.push_back(in(v.scaled_row + s.row0, s.rows));
    a.push_back(in(v.col + s.col0, s.cols));
  }

  // 1-bit Adam's signs of one tensor: its words in every block, and the blocks' scales.
  static void add_blocks(std::vector<Access>& a, const SignBlocks& b, bool writes) {
    const size_t words = (b.chunk + 31) / 32;
    for (size_t q = 0; q < b.blocks; ++q) {
      uint32_t* w = b.words + q * b.block_words + b.word0;
      a.push_back(writes ? out(w, words) : in(w, words));
      a.push_back(writes ? out(b.scales + q * b.scale_stride, 1) : in(b.scales + q * b.scale_stride, 1));
    }
  }

  ComputeQueue& q_;
  OptimizerOps& k_;
};

}  // namespace

template <typename T>
std::unique_ptr<KernelOps<T>> make_queued_kernels(ComputeQueue& queue, KernelOps<T>& inner) {
  return std::make_unique<QueuedKernels<T>>(queue, inner);
}
template std::unique_ptr<KernelOps<float>> make_queued_kernels(ComputeQueue&, KernelOps<float>&);
template std::unique_ptr<KernelOps<bf16>> make_queued_kernels(ComputeQueue&, KernelOps<bf16>&);

std::unique_ptr<OptimizerOps> make_queued_optimizer_ops(ComputeQueue& queue, OptimizerOps& inner) {
  return std::make_unique<QueuedOptimizerOps>(queue, inner);
}

}  // namespace zt::emulated
