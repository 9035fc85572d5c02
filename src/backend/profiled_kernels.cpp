#include "backend/profiled_kernels.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

const char* op_class_name(OpClass c) {
  static constexpr const char* kNames[kNumOpClasses] = {"gemm",        "attention", "norm",         "classifier",
                                                        "elementwise", "optimizer", "communication"};
  return kNames[int(c)];
}

void OpTimeline::begin_step() {
  ZT_CHECK(!active_, "OpTimeline: begin_step inside a profiled step");
  used_ = 0;
  brackets_.clear();
  open_.clear();
  active_ = true;
  step_start_ = std::chrono::steady_clock::now();
}

size_t OpTimeline::record_next() {
  if (used_ == events_.size()) events_.push_back(backend_.create_timing_event());
  backend_.record(*events_[used_], backend_.compute_stream());
  return used_++;
}

void OpTimeline::begin(OpClass c) {
  ZT_CHECK(active_, "OpTimeline: a bracket outside a profiled step");
  const int parent = open_.empty() ? -1 : open_.back();
  brackets_.push_back({c, parent, record_next(), 0});
  open_.push_back(int(brackets_.size()) - 1);
}

void OpTimeline::end() {
  ZT_CHECK(!open_.empty(), "OpTimeline: end without begin");
  brackets_[size_t(open_.back())].end = record_next();
  open_.pop_back();
}

StepTimes OpTimeline::end_step() {
  ZT_CHECK(active_ && open_.empty(), "OpTimeline: end_step outside a step or with a bracket open");
  active_ = false;
  // The step's one wait: after it every event has completed, and elapsed_ms waits no more.
  backend_.synchronize(backend_.compute_stream());
  StepTimes t;
  t.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
  // A bracket's own time is its span less its children's spans (on one stream they nest in time).
  std::vector<double> span(brackets_.size()), children(brackets_.size(), 0.0);
  for (size_t i = 0; i < brackets_.size(); ++i) {
    const Bracket& b = brackets_[i];
    span[i] = backend_.elapsed_ms(*events_[b.start], *events_[b.end]);
    if (b.parent >= 0) children[size_t(b.parent)] += span[i];
  }
  for (size_t i = 0; i < brackets_.size(); ++i) {
    const int c = int(brackets_[i].cls);
    // A GPU's event clock has about half a microsecond of resolution: a difference may dip below 0.
    t.ms[size_t(c)] += std::max(0.0, span[i] - children[i]);
    ++t.calls[size_t(c)];
  }
  return t;
}

namespace {

// Every op of KernelOps<T>, forwarded to `inner_` between a start and an end event, and every
// setting and property forwarded untimed. Whatever KernelOps gains must be forwarded here: a
// virtual with a default (set_matmul_dtype, attention_saves_lse) would otherwise silently answer
// the default rather than the wrapped table.
template <typename T>
class ProfiledKernels final : public KernelOps<T> {
 public:
  using G = GradOf<T>;
  using S = StatOf<T>;
  ProfiledKernels(KernelOps<T>& inner, OpTimeline& timeline) : inner_(inner), timeline_(timeline) {}

  void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C) override {
    timed(OpClass::kElementwise, [&] { inner_.embedding_forward(out, tokens, wte, wpe, B, T_, C); });
  }
  void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C) override {
    timed(OpClass::kElementwise, [&] { inner_.embedding_backward(dwte, dwpe, dout, tokens, B, T_, C); });
  }
  void layernorm_forward(T* out, S* mean, S* rstd, const T* x, const T* weight, const T* bias, int rows, int C,
                         double eps) override {
    timed(OpClass::kNorm, [&] { inner_.layernorm_forward(out, mean, rstd, x, weight, bias, rows, C, eps); });
  }
  void layernorm_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, const S* mean,
                          const S* rstd, int rows, int C) override {
    timed(OpClass::kNorm,
          [&] { inner_.layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, C); });
  }
  void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                      int out_dim) override {
    timed(OpClass::kGemm, [&] { inner_.matmul_forward(out, x, weight, bias, rows, in_dim, out_dim); });
  }
  void matmul_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows,
                       int in_dim, int out_dim) override {
    timed(OpClass::kGemm,
          [&] { inner_.matmul_backward(dx, dweight, dbias, dout, x, weight, rows, in_dim, out_dim); });
  }
  bool attention_saves_lse() const override { return inner_.attention_saves_lse(); }
  void attention_forward(T* out, S* att, const T* qkv, int B, int T_, int C, int NH) override {
    timed(OpClass::kAttention, [&] { inner_.attention_forward(out, att, qkv, B, T_, C, NH); });
  }
  void attention_backward(T* dqkv, const T* dout, const T* out, const T* qkv, const S* att, int B, int T_, int C,
                          int NH) override {
    timed(OpClass::kAttention, [&] { inner_.attention_backward(dqkv, dout, out, qkv, att, B, T_, C, NH); });
  }
  void gelu_forward(T* out, const T* x, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.gelu_forward(out, x, n); });
  }
  void gelu_backward(T* dx, const T* x, const T* dout, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.gelu_backward(dx, x, dout, n); });
  }
  void residual_forward(T* out, const T* a, const T* b, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.residual_forward(out, a, b, n); });
  }
  void accumulate(T* acc, const T* x, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.accumulate(acc, x, n); });
  }
  // A GEMM with its neighbour: the table's fused op (an epilogue) is timed as the GEMM it mostly is.
  void matmul_forward_residual(T* out, const T* x, const T* weight, const T* bias, const T* residual, int rows,
                               int in_dim, int out_dim) override {
    timed(OpClass::kGemm,
          [&] { inner_.matmul_forward_residual(out, x, weight, bias, residual, rows, in_dim, out_dim); });
  }
  void linear_forward_residual(T* out, const T* x, const T* weight, const T* bias, const T* residual, int rows,
                               int in_dim, int out_dim) override {
    timed(OpClass::kGemm,
          [&] { inner_.linear_forward_residual(out, x, weight, bias, residual, rows, in_dim, out_dim); });
  }
  void matmul_gelu_forward(T* pre, T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                           int out_dim) override {
    timed(OpClass::kGemm, [&] { inner_.matmul_gelu_forward(pre, out, x, weight, bias, rows, in_dim, out_dim); });
  }
  void matmul_backward_gelu(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight,
                            const T* gelu_pre, int rows, int in_dim, int out_dim) override {
    timed(OpClass::kGemm, [&] {
      inner_.matmul_backward_gelu(dx, dweight, dbias, dout, x, weight, gelu_pre, rows, in_dim, out_dim);
    });
  }
  void softmax_xent_forward(T* logits_to_probs, S* losses, const int32_t* targets, int rows, int V,
                            double* loss_sum, double weight) override {
    timed(OpClass::kClassifier,
          [&] { inner_.softmax_xent_forward(logits_to_probs, losses, targets, rows, V, loss_sum, weight); });
  }
  void softmax_xent_backward(T* probs_to_dlogits, const int32_t* targets, int rows, int V, double dloss) override {
    timed(OpClass::kClassifier, [&] { inner_.softmax_xent_backward(probs_to_dlogits, targets, rows, V, dloss); });
  }
  // The classifier fuses the lm_head's GEMMs with the loss (as a table may): one class for both.
  int logits_stride(int V) const override { return inner_.logits_stride(V); }
  void classifier_forward(T* logits, S* losses, const T* x, const T* head, const int32_t* targets, int rows, int C,
                          int V, double* loss_sum, double weight) override {
    timed(OpClass::kClassifier, [&] {
      inner_.classifier_forward(logits, losses, x, head, targets, rows, C, V, loss_sum, weight);
    });
  }
  void classifier_backward(T* dx, G* dhead, T* logits, const T* x, const T* head, const int32_t* targets, int rows,
                           int C, int V, double dloss) override {
    timed(OpClass::kClassifier,
          [&] { inner_.classifier_backward(dx, dhead, logits, x, head, targets, rows, C, V, dloss); });
  }
  void classifier_forward_backward(T* dx, G* dhead, T* logits, S* losses, const T* x, const T* head,
                                   const int32_t* targets, int rows, int C, int V, double* loss_sum, double weight,
                                   double dloss) override {
    timed(OpClass::kClassifier, [&] {
      inner_.classifier_forward_backward(dx, dhead, logits, losses, x, head, targets, rows, C, V, loss_sum, weight,
                                         dloss);
    });
  }
  DType set_matmul_dtype(DType dtype) override { return inner_.set_matmul_dtype(dtype); }
  bool set_allow_tf32(bool allow) override { return inner_.set_allow_tf32(allow); }
  bool set_batch_invariant(bool on) override { return inner_.set_batch_invariant(on); }
  bool weight_packs(const void* lo, const void* hi, WeightPacks what) override {
    return inner_.weight_packs(lo, hi, what);
  }
  void linear_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                      int out_dim) override {
    timed(OpClass::kGemm, [&] { inner_.linear_forward(out, x, weight, bias, rows, in_dim, out_dim); });
  }
  void linear_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows, int in_dim,
                       int out_dim, bool accumulate_dx) override {
    timed(OpClass::kGemm, [&] {
      inner_.linear_backward(dx, dweight, dbias, dout, x, weight, rows, in_dim, out_dim, accumulate_dx);
    });
  }
  void rmsnorm_forward(T* out, S* rstd, const T* x, const T* weight, int rows, int C, double eps) override {
    timed(OpClass::kNorm, [&] { inner_.rmsnorm_forward(out, rstd, x, weight, rows, C, eps); });
  }
  void rmsnorm_backward(T* dx, G* dweight, const T* dout, const T* x, const T* weight, const S* rstd, int rows,
                        int C) override {
    timed(OpClass::kNorm, [&] { inner_.rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows, C); });
  }
  void rotary(T* x, const S* cos, const S* sin, int B, int T_, int heads, int hs, bool inverse) override {
    timed(OpClass::kElementwise, [&] { inner_.rotary(x, cos, sin, B, T_, heads, hs, inverse); });
  }
  void gqa_attention_forward(T* out, S* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int NH,
                             int NKV, int hs) override {
    timed(OpClass::kAttention, [&] { inner_.gqa_attention_forward(out, att, q, k, v, B, Tq, Tk, NH, NKV, hs); });
  }
  void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* q, const T* k, const T* v,
                              const S* att, int B, int T_, int NH, int NKV, int hs) override {
    timed(OpClass::kAttention,
          [&] { inner_.gqa_attention_backward(dq, dk, dv, dout, out, q, k, v, att, B, T_, NH, NKV, hs); });
  }
  void swiglu_forward(T* out, const T* gate, const T* up, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.swiglu_forward(out, gate, up, n); });
  }
  void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) override {
    timed(OpClass::kElementwise, [&] { inner_.swiglu_backward(dgate, dup, dout, gate, up, n); });
  }

 private:
  template <typename Op>
  void timed(OpClass c, Op&& op) {
    if (!timeline_.active()) return op();
    timeline_.begin(c);
    op();
    timeline_.end();
  }

  KernelOps<T>& inner_;
  OpTimeline& timeline_;
};

}  // namespace

template <typename T>
std::unique_ptr<KernelOps<T>> make_profiled_kernels(KernelOps<T>& inner, OpTimeline& timeline) {
  return std::make_unique<ProfiledKernels<T>>(inner, timeline);
}

template std::unique_ptr<KernelOps<float>> make_profiled_kernels(KernelOps<float>&, OpTimeline&);
template std::unique_ptr<KernelOps<bf16>> make_profiled_kernels(KernelOps<bf16>&, OpTimeline&);

}  // namespace zt
