#include "model/llama.h"

#include <vector>

#include "core/error.h"
#include "model/model_memory.h"
#include "model/rope.h"

namespace zt {

template <typename T>
LlamaModel<T>::LlamaModel(const LlamaLayout& layout, Backend& backend, KernelOps<T>& ops, int max_batch,
                          int max_seq_len, bool activation_checkpointing, int classifier_chunk)
    : CausalLM<T>(backend, ops, max_batch, max_seq_len, layout.config().vocab_size, classifier_chunk),
      layout_(layout),
      checkpointing_(activation_checkpointing) {
  const auto& cfg = layout.config();
  ZT_USAGE_CHECK(max_seq_len <= cfg.n_positions, "block_size ", max_seq_len, " exceeds max_position_embeddings ",
                 cfg.n_positions);
  // A window at least as long as the sequence masks nothing: plain causal attention is exact.
  ZT_USAGE_CHECK(cfg.sliding_window == 0 || max_seq_len <= cfg.sliding_window, "block_size ", max_seq_len,
                 " exceeds the model's sliding_window ", cfg.sliding_window,
                 ": windowed attention is not implemented");
  q_dim_ = cfg.n_head * cfg.head_size();
  kv_dim_ = cfg.n_kv_head * cfg.head_size();
  // The arrays zero_estimate counts (model_memory.h), allocated one by one.
  const LlamaActivationArrays a =
      llama_activation_arrays(cfg, size_t(max_batch), size_t(max_seq_len), checkpointing_, ops.attention_saves_lse(),
                              size_t(ops.logits_stride(cfg.vocab_size)), size_t(this->logits_rows()));
  per_block_elems_ = a.per_block;
  per_block_stats_ = a.per_block_stats;
  block_inputs_ = DeviceArray<T>(backend, a.block_inputs);
  acts_ = DeviceArray<T>(backend, a.acts);
  act_stats_ = DeviceArray<S>(backend, a.act_stats);
  lnf_ = DeviceArray<T>(backend, a.lnf);
  lnf_rstd_ = DeviceArray<S>(backend, a.lnf_rstd);
  logits_ = DeviceArray<T>(backend, a.logits);
  losses_ = DeviceArray<S>(backend, a.losses);
  rope_cos_ = DeviceArray<S>(backend, a.rope_cos);
  rope_sin_ = DeviceArray<S>(backend, a.rope_sin);
  dres_ = DeviceArray<T>(backend, a.dres);
  dln_ = DeviceArray<T>(backend, a.dln);
  datty_ = DeviceArray<T>(backend, a.datty);
  dq_ = DeviceArray<T>(backend, a.dq);
  dk_ = DeviceArray<T>(backend, a.dk);
  dv_ = DeviceArray<T>(backend, a.dv);
  dh_ = DeviceArray<T>(backend, a.dh);
  dgate_ = DeviceArray<T>(backend, a.dgate);
  dup_ = DeviceArray<T>(backend, a.dup);
  xn_ = DeviceArray<T>(backend, a.xn);

  // The rotary tables, once: computed on the host, copied through pinned staging.
  std::vector<double> cos, sin;
  rope_tables(cfg, max_seq_len, cos, sin);
  DeviceArray<S> staging(backend, 2 * cos.size(), Pool::kPinned);
  for (size_t i = 0; i < cos.size(); ++i) {
    staging.data()[i] = S(cos[i]);
    staging.data()[cos.size() + i] = S(sin[i]);
  }
  Stream& compute = backend.compute_stream();
  backend.copy_async(rope_cos_.data(), staging.data(), cos.size() * sizeof(S), compute);
  backend.copy_async(rope_sin_.data(), staging.data() + cos.size(), sin.size() * sizeof(S), compute);
  backend.synchronize(compute);  // before the staging is freed
}

template <typename T>
size_t LlamaModel<T>::activation_bytes() const {
  size_t total = act_stats_.bytes() + lnf_rstd_.bytes() + losses_.bytes() + rope_cos_.bytes() + rope_sin_.bytes();
  for (const auto* a : {&block_inputs_, &acts_, &lnf_, &logits_, &dres_, &dln_, &datty_, &dq_, &dk_, &dv_, &dh_,
                        &dgate_, &dup_, &xn_}) {
    total += a->bytes();
  }
  return total;
}

template <typename T>
double LlamaModel<T>::flops_per_token_forward(int seq_len) const {
  const auto& cfg = layout_.config();
  const double C = cfg.n_embd, L = cfg.n_layer, V = cfg.vocab_size, I = cfg.intermediate_size;
  // Matmuls per block: q and o (C x q), k and v (C x kv), gate, up and down (C x I); the lm_head
  // V x C; 2 FLOPs per MAC. Attention: QK^T and att @ V over on average T/2 keys.
  const double per_block = 2.0 * C * q_dim_ + 2.0 * C * kv_dim_ + 3.0 * C * I;
  return 2.0 * (L * per_block + V * C) + L * 2.0 * 2.0 * q_dim_ * (seq_len / 2.0);
}

template <typename T>
LlamaBlockActs<T> LlamaModel<T>::block_acts(int layer) {
  const auto& cfg = layout_.config();
  const size_t slot = size_t(checkpointing_ ? 0 : layer);
  T* p = acts_.data() + slot * per_block_elems_;
  S* ps = act_stats_.data() + slot * per_block_stats_;
  // Slices are laid out for the current (B, T), inside a slot sized for the maximum.
  const size_t att = size_t(batch_) * cfg.n_head * seq_ * (ops_.attention_saves_lse() ? 1 : seq_);
  // The norm outputs and the SwiGLU product are not kept (model_memory.cpp): the product lives in
  // dgate_ from the forward until the backward has used it, then dgate_ takes its gradient.
  return carve_llama_block_acts(p, ps, cfg, size_t(batch_) * seq_, att, true, xn_.data(), dgate_.data());
}

template <typename T>
void LlamaModel<T>::project_backward(T* dx, G* g, const T* dout, const T* x, const T* w, size_t weight, size_t bias,
                                     int rows, int in, int out_dim, bool accumulate_dx) {
  ops_.linear_backward(dx, g + weight, bias == LlamaBlockOffsets::kNone ? nullptr : g + bias, dout, x, w + weight,
                       rows, in, out_dim, accumulate_dx);
}

namespace {

/// out = x @ w[weight]^T (+ w[bias]) (+ residual, added by the GEMM where the table fuses it)
template <typename T>
void project(KernelOps<T>& ops, T* out, const T* x, const T* w, size_t weight, size_t bias, int rows, int in,
             int out_dim, const T* residual = nullptr) {
  const T* b = bias == LlamaBlockOffsets::kNone ? nullptr : w + bias;
  if (residual) ops.linear_forward_residual(out, x, w + weight, b, residual, rows, in, out_dim);
  else ops.linear_forward(out, x, w + weight, b, rows, in, out_dim);
}

// From the attention's output on: res2 = x + o_proj(atty), then out = res2 + mlp(norm(res2)).
template <typename T>
void block_after_attention(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                           const T* x, T* out, const LlamaBlockActs<T>& a, int rows) {
  const int C = cfg.n_embd, I = cfg.intermediate_size, q_dim = cfg.n_head * cfg.head_size();
  project(ops, a.res2, a.atty, w, o.o, o.o_bias, rows, q_dim, C, x);  // residual: res2 = x + o_proj(attention)
  ops.rmsnorm_forward(a.xn2, a.rstd2, a.res2, w + o.post_norm, rows, C, cfg.layer_norm_epsilon);
  project(ops, a.gate, a.xn2, w, o.gate, o.gate_bias, rows, C, I);
  project(ops, a.up, a.xn2, w, o.up, o.up_bias, rows, C, I);
  ops.swiglu_forward(a.h, a.gate, a.up, size_t(rows) * I);
  project(ops, out, a.h, w, o.down, o.down_bias, rows, I, C, a.res2);  // residual: out = res2 + mlp
}

}  // namespace

template <typename T>
void llama_block_forward(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                         const T* x, T* out, const LlamaBlockActs<T>& a, int B, int T_, const StatOf<T>* cos,
                         const StatOf<T>* sin) {
  const int BT = B * T_, C = cfg.n_embd, hs = cfg.head_size();
  const int q_dim = cfg.n_head * hs, kv_dim = cfg.n_kv_head * hs;
  ops.rmsnorm_forward(a.xn1, a.rstd1, x, w + o.input_norm, BT, C, cfg.layer_norm_epsilon);
  project(ops, a.q, a.xn1, w, o.q, o.q_bias, BT, C, q_dim);
  project(ops, a.k, a.xn1, w, o.k, o.k_bias, BT, C, kv_dim);
  project(ops, a.v, a.xn1, w, o.v, o.v_bias, BT, C, kv_dim);
  ops.rotary(a.q, cos, sin, B, T_, cfg.n_head, hs, false);
  ops.rotary(a.k, cos, sin, B, T_, cfg.n_kv_head, hs, false);
  ops.gqa_attention_forward(a.atty, a.att, a.q, a.k, a.v, B, T_, T_, cfg.n_head, cfg.n_kv_head, hs);
  block_after_attention(ops, cfg, o, w, x, out, a, BT);
}

template <typename T>
void llama_block_decode(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                        const T* x, T* out, const LlamaBlockActs<T>& a,
                        const std::vector<LlamaDecodeSegment<T>>& segments, const StatOf<T>* cos,
                        const StatOf<T>* sin) {
  const int C = cfg.n_embd, hs = cfg.head_size();
  const int q_dim = cfg.n_head * hs, kv_dim = cfg.n_kv_head * hs;
  const size_t half = size_t(hs / 2);
  int rows = 0;
  for (const LlamaDecodeSegment<T>& s : segments) rows += s.tokens;
  ops.rmsnorm_forward(a.xn1, a.rstd1, x, w + o.input_norm, rows, C, cfg.layer_norm_epsilon);
  project(ops, a.q, a.xn1, w, o.q, o.q_bias, rows, C, q_dim);
  size_t row = 0;
  for (const LlamaDecodeSegment<T>& s : segments) {
    const size_t at = size_t(s.position);
    const T* xn = a.xn1 + row * C;
    T* q = a.q + row * q_dim;
    T* k = s.k_all + at * kv_dim;
    project(ops, k, xn, w, o.k, o.k_bias, s.tokens, C, kv_dim);
    project(ops, s.v_all + at * kv_dim, xn, w, o.v, o.v_bias, s.tokens, C, kv_dim);
    ops.rotary(q, cos + at * half, sin + at * half, 1, s.tokens, cfg.n_head, hs, false);
    ops.rotary(k, cos + at * half, sin + at * half, 1, s.tokens, cfg.n_kv_head, hs, false);
    ops.gqa_attention_forward(a.atty + row * q_dim, a.att, q, s.k_all, s.v_all, 1, s.tokens, s.position + s.tokens,
                              cfg.n_head, cfg.n_kv_head, hs);
    row += size_t(s.tokens);
  }
  block_after_attention(ops, cfg, o, w, x, out, a, rows);
}

// dres holds d(block output) on entry and d(block input) on return. a.xn1 = a.xn2 and a.h are
// shared (block_acts): they hold this block's values only where `recomputed` says the block's
// forward has just run again (activation checkpointing); else the SwiGLU product and the second
// norm output are recomputed here first, and the first norm output always is, before its use.
template <typename T>
void LlamaModel<T>::block_backward(const T* w, G* g, const T* x, const LlamaBlockActs<T>& a, T* dres, int B,
                                   int T_, bool recomputed) {
  const auto& cfg = layout_.config();
  const LlamaBlockOffsets& o = layout_.block();
  const int BT = B * T_, C = cfg.n_embd, I = cfg.intermediate_size, hs = cfg.head_size();
  if (!recomputed) {
    ops_.swiglu_forward(a.h, a.gate, a.up, size_t(BT) * I);
    ops_.rmsnorm_forward(a.xn2, a.rstd2, a.res2, w + o.post_norm, BT, C, cfg.layer_norm_epsilon);
  }
  project_backward(dh_.data(), g, dres, a.h, w, o.down, o.down_bias, BT, I, C, false);
  ops_.swiglu_backward(dgate_.data(), dup_.data(), dh_.data(), a.gate, a.up, size_t(BT) * I);
  project_backward(dln_.data(), g, dup_.data(), a.xn2, w, o.up, o.up_bias, BT, C, I, false);
  project_backward(dln_.data(), g, dgate_.data(), a.xn2, w, o.gate, o.gate_bias, BT, C, I, true);
  // The residual passes dres through; the norm adds its part (dx +=), giving d(res2).
  ops_.rmsnorm_backward(dres, g + o.post_norm, dln_.data(), a.res2, w + o.post_norm, a.rstd2, BT, C);
  project_backward(datty_.data(), g, dres, a.atty, w, o.o, o.o_bias, BT, q_dim_, C, false);
  ops_.gqa_attention_backward(dq_.data(), dk_.data(), dv_.data(), datty_.data(), a.atty, a.q, a.k, a.v, a.att, B, T_,
                              cfg.n_head, cfg.n_kv_head, hs);
  // Through the rotation: the inverse rotation of the gradients.
  ops_.rotary(dq_.data(), rope_cos_.data(), rope_sin_.data(), B, T_, cfg.n_head, hs, true);
  ops_.rotary(dk_.data(), rope_cos_.data(), rope_sin_.data(), B, T_, cfg.n_kv_head, hs, true);
  ops_.rmsnorm_forward(a.xn1, a.rstd1, x, w + o.input_norm, BT, C, cfg.layer_norm_epsilon);
  project_backward(dln_.data(), g, dq_.data(), a.xn1, w, o.q, o.q_bias, BT, C, q_dim_, false);
  project_backward(dln_.data(), g, dk_.data(), a.xn1, w, o.k, o.k_bias, BT, C, kv_dim_, true);
  project_backward(dln_.data(), g, dv_.data(), a.xn1, w, o.v, o.v_bias, BT, C, kv_dim_, true);
  ops_.rmsnorm_backward(dres, g + o.input_norm, dln_.data(), x, w + o.input_norm, a.rstd1, BT, C);
}

template <typename T>
void LlamaModel<T>::forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
                            double loss_weight, std::optional<double> backward_scale) {
  const auto& cfg = layout_.config();
  this->start_forward(inputs, targets, B, T_);
  const size_t BT = size_t(B) * T_, C = cfg.n_embd;

  const T* emb = params.acquire_weights(layout_.embedding_unit());
  ops_.embedding_forward(block_inputs_.data(), inputs_.data(), emb, nullptr, B, T_, cfg.n_embd);
  params.release_weights(layout_.embedding_unit());

  for (int l = 0; l < cfg.n_layer; ++l) {
    const T* w = params.acquire_weights(layout_.block_unit(l));
    llama_block_forward(ops_, cfg, layout_.block(), w, block_inputs_.data() + l * BT * C,
                        block_inputs_.data() + (l + 1) * BT * C, block_acts(l), B, T_, rope_cos_.data(),
                        rope_sin_.data());
    params.release_weights(layout_.block_unit(l));
  }

  const T* wf = params.acquire_weights(layout_.final_norm_unit());
  ops_.rmsnorm_forward(lnf_.data(), lnf_rstd_.data(), block_inputs_.data() + cfg.n_layer * BT * C, wf, int(BT),
                       cfg.n_embd, cfg.layer_norm_epsilon);
  params.release_weights(layout_.final_norm_unit());

  this->head_forward(params, layout_.lm_head_unit(), lnf_.data(), logits_.data(), losses_.data(), dln_.data(),
                     cfg.n_embd, cfg.vocab_size, loss_weight, backward_scale);
}

template <typename T>
void LlamaModel<T>::backward(ParamSource<T>& params, double dloss_scale) {
  ZT_CHECK(batch_ > 0, "backward without forward");
  const auto& cfg = layout_.config();
  const int B = batch_, T_ = seq_, BT = B * T_, C = cfg.n_embd;
  const size_t BTC = size_t(BT) * C;
  const int emb_unit = layout_.embedding_unit(), head_unit = layout_.lm_head_unit();
  const int final_unit = layout_.final_norm_unit();

  // lm_head: its own unit finishes here; a tied one finishes at the embedding.
  G* g_head = this->head_backward(params, head_unit, emb_unit, lnf_.data(), logits_.data(), dln_.data(), C,
                                  cfg.vocab_size, dloss_scale);

  const T* wf = params.acquire_weights(final_unit);
  G* gf = params.grad_accumulator(final_unit);
  backend_.zero_async(dres_.data(), BTC * sizeof(T), backend_.compute_stream());
  ops_.rmsnorm_backward(dres_.data(), gf, dln_.data(), block_inputs_.data() + cfg.n_layer * BTC, wf, lnf_rstd_.data(),
                        BT, C);
  params.release_weights(final_unit);
  params.grads_done(final_unit);

  this->blocks_backward(params, cfg.n_layer, [&](int l) { return layout_.block_unit(l); },
                        [&](int l, const T* w, G* g) {
                          const T* x = block_inputs_.data() + l * BTC;
                          const LlamaBlockActs<T> a = block_acts(l);
                          if (checkpointing_) {
                            // Recompute this block's activations from its saved input; the output
                            // goes to scratch (the next block's input is already saved).
                            llama_block_forward(ops_, cfg, layout_.block(), w, x, dln_.data(), a, B, T_,
                                                rope_cos_.data(), rope_sin_.data());
                          }
                          block_backward(w, g, x, a, dres_.data(), B, T_, checkpointing_);
                        });

  G* g_emb = head_unit == emb_unit ? g_head : params.grad_accumulator(emb_unit);
  ops_.embedding_backward(g_emb, nullptr, dres_.data(), inputs_.data(), B, T_, C);
  params.grads_done(emb_unit);
  params.backward_done();
}

template void llama_block_forward(KernelOps<float>&, const ModelConfig&, const LlamaBlockOffsets&, const float*,
                                  const float*, float*, const LlamaBlockActs<float>&, int, int, const float*,
                                  const float*);
template void llama_block_forward(KernelOps<double>&, const ModelConfig&, const LlamaBlockOffsets&, const double*,
                                  const double*, double*, const LlamaBlockActs<double>&, int, int, const double*,
                                  const double*);
template void llama_block_decode(KernelOps<float>&, const ModelConfig&, const LlamaBlockOffsets&, const float*,
                                 const float*, float*, const LlamaBlockActs<float>&,
                                 const std::vector<LlamaDecodeSegment<float>>&, const float*, const float*);
template class LlamaModel<float>;
template class LlamaModel<double>;
template class LlamaModel<bf16>;

}  // namespace zt
