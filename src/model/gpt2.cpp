#include "model/gpt2.h"

#include <cstring>

#include "core/error.h"
#include "model/model_memory.h"

namespace zt {

template <typename T>
Gpt2Model<T>::Gpt2Model(const Gpt2Layout& layout, Backend& backend, KernelOps<T>& ops, int max_batch,
                        int max_seq_len, bool activation_checkpointing, int classifier_chunk)
    : CausalLM<T>(backend, ops, max_batch, max_seq_len, layout.config().vocab_size, classifier_chunk),
      layout_(layout),
      checkpointing_(activation_checkpointing) {
  const auto& cfg = layout.config();
  ZT_USAGE_CHECK(max_seq_len <= cfg.n_positions, "block_size ", max_seq_len, " exceeds n_positions ",
                 cfg.n_positions);
  // The arrays zero_estimate counts (model_memory.h), allocated one by one.
  const Gpt2ActivationArrays a =
      gpt2_activation_arrays(cfg, size_t(max_batch), size_t(max_seq_len), checkpointing_, ops.attention_saves_lse(),
                             size_t(ops.logits_stride(cfg.vocab_size)), size_t(this->logits_rows()));
  per_block_elems_ = a.per_block;
  per_block_stats_ = a.per_block_stats;
  block_inputs_ = DeviceArray<T>(backend, a.block_inputs);
  acts_ = DeviceArray<T>(backend, a.acts);
  act_stats_ = DeviceArray<S>(backend, a.act_stats);
  lnf_ = DeviceArray<T>(backend, a.lnf);
  lnf_mean_ = DeviceArray<S>(backend, a.lnf_mean);
  lnf_rstd_ = DeviceArray<S>(backend, a.lnf_rstd);
  logits_ = DeviceArray<T>(backend, a.logits);
  losses_ = DeviceArray<S>(backend, a.losses);
  dres_ = DeviceArray<T>(backend, a.dres);
  dln_ = DeviceArray<T>(backend, a.dln);
  dqkv_ = DeviceArray<T>(backend, a.dqkv);
  datty_ = DeviceArray<T>(backend, a.datty);
  dfch_ = DeviceArray<T>(backend, a.dfch);
}

template <typename T>
size_t Gpt2Model<T>::activation_bytes() const {
  size_t total = act_stats_.bytes() + lnf_mean_.bytes() + lnf_rstd_.bytes() + losses_.bytes();
  for (const auto* a : {&block_inputs_, &acts_, &lnf_, &logits_, &dres_, &dln_, &dqkv_, &datty_, &dfch_}) {
    total += a->bytes();
  }
  return total;
}

template <typename T>
double Gpt2Model<T>::flops_per_token_forward(int seq_len) const {
  const auto& cfg = layout_.config();
  const double C = cfg.n_embd, L = cfg.n_layer, V = cfg.vocab_size;
  // Matmuls: qkv 3C^2, proj C^2, fc 4C^2, fc_proj 4C^2 per block, lm_head V C; 2 FLOPs per MAC.
  // Attention: QK^T and att @ V over on average T/2 keys (causal), 2 FLOPs per MAC each.
  return 2.0 * (L * 12.0 * C * C + V * C) + L * 2.0 * 2.0 * C * (seq_len / 2.0);
}

template <typename T>
typename Gpt2Model<T>::BlockActs Gpt2Model<T>::block_acts(int layer) {
  const auto& cfg = layout_.config();
  const size_t BT = size_t(batch_) * seq_, C = cfg.n_embd;
  // Slices are laid out for the current (B, T), inside a slot sized for the maximum.
  const size_t slot = size_t(checkpointing_ ? 0 : layer);
  T* p = acts_.data() + slot * per_block_elems_;
  S* ps = act_stats_.data() + slot * per_block_stats_;
  auto take = [](auto*& from, size_t n) {
    auto* out = from;
    from += n;
    return out;
  };
  BlockActs a{};
  a.ln1 = take(p, BT * C);
  a.qkv = take(p, BT * 3 * C);
  a.atty = take(p, BT * C);
  a.res2 = take(p, BT * C);
  a.ln2 = take(p, BT * C);
  a.fch = take(p, BT * 4 * C);
  a.fch_gelu = take(p, BT * 4 * C);
  a.ln1_mean = take(ps, BT);
  a.ln1_rstd = take(ps, BT);
  a.ln2_mean = take(ps, BT);
  a.ln2_rstd = take(ps, BT);
  a.att = take(ps, size_t(batch_) * cfg.n_head * seq_ * (ops_.attention_saves_lse() ? 1 : seq_));
  return a;
}

template <typename T>
void Gpt2Model<T>::block_forward(const T* w, const T* x, T* out, const BlockActs& a, int B, int T_) {
  const auto& cfg = layout_.config();
  const BlockOffsets& o = layout_.block();
  const int BT = B * T_, C = cfg.n_embd;
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w + o.ln1_w, w + o.ln1_b, BT, C, cfg.layer_norm_epsilon);
  ops_.matmul_forward(a.qkv, a.ln1, w + o.attn_w, w + o.attn_b, BT, C, 3 * C);
  ops_.attention_forward(a.atty, a.att, a.qkv, B, T_, C, cfg.n_head);
  // residual: res2 = x + proj(attn), the residual added by the GEMM where the table fuses it
  ops_.matmul_forward_residual(a.res2, a.atty, w + o.attn_proj_w, w + o.attn_proj_b, x, BT, C, C);
  ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w + o.ln2_w, w + o.ln2_b, BT, C,
                         cfg.layer_norm_epsilon);
  ops_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w + o.fc_w, w + o.fc_b, BT, C, 4 * C);
  // residual: out = res2 + mlp
  ops_.matmul_forward_residual(out, a.fch_gelu, w + o.fc_proj_w, w + o.fc_proj_b, a.res2, BT, 4 * C, C);
}

// dres holds d(block output) on entry and d(block input) on return.
template <typename T>
void Gpt2Model<T>::block_backward(const T* w, G* g, const T* x, const BlockActs& a, T* dres, int B, int T_) {
  const auto& cfg = layout_.config();
  const BlockOffsets& o = layout_.block();
  const int BT = B * T_, C = cfg.n_embd;
  // d(fch), the GELU's input: fc_proj's dx with the GELU's backward folded in
  ops_.matmul_backward_gelu(dfch_.data(), g + o.fc_proj_w, g + o.fc_proj_b, dres, a.fch_gelu, w + o.fc_proj_w, a.fch,
                            BT, 4 * C, C);
  ops_.matmul_backward(dln_.data(), g + o.fc_w, g + o.fc_b, dfch_.data(), a.ln2, w + o.fc_w, BT, C, 4 * C);
  // The residual passes dres through; layernorm adds its part (dx +=), giving d(res2).
  ops_.layernorm_backward(dres, g + o.ln2_w, g + o.ln2_b, dln_.data(), a.res2, w + o.ln2_w, a.ln2_mean,
                          a.ln2_rstd, BT, C);
  ops_.matmul_backward(datty_.data(), g + o.attn_proj_w, g + o.attn_proj_b, dres, a.atty, w + o.attn_proj_w, BT,
                       C, C);
  ops_.attention_backward(dqkv_.data(), datty_.data(), a.atty, a.qkv, a.att, B, T_, C, cfg.n_head);
  ops_.matmul_backward(dln_.data(), g + o.attn_w, g + o.attn_b, dqkv_.data(), a.ln1, w + o.attn_w, BT, C, 3 * C);
  ops_.layernorm_backward(dres, g + o.ln1_w, g + o.ln1_b, dln_.data(), x, w + o.ln1_w, a.ln1_mean, a.ln1_rstd,
                          BT, C);
}

template <typename T>
void Gpt2Model<T>::forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
                           double loss_weight, std::optional<double> backward_scale) {
  const auto& cfg = layout_.config();
  this->start_forward(inputs, targets, B, T_);
  const size_t BT = size_t(B) * T_, C = cfg.n_embd;

  const T* emb = params.acquire_weights(layout_.embedding_unit());
  ops_.embedding_forward(block_inputs_.data(), inputs_.data(), emb, emb + layout_.wpe_offset(), B, T_, cfg.n_embd);
  params.release_weights(layout_.embedding_unit());

  for (int l = 0; l < cfg.n_layer; ++l) {
    const T* w = params.acquire_weights(layout_.block_unit(l));
    block_forward(w, block_inputs_.data() + l * BT * C, block_inputs_.data() + (l + 1) * BT * C, block_acts(l), B,
                  T_);
    params.release_weights(layout_.block_unit(l));
  }

  const T* wf = params.acquire_weights(layout_.final_norm_unit());
  ops_.layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), block_inputs_.data() + cfg.n_layer * BT * C,
                         wf, wf + layout_.lnf_bias_offset(), int(BT), cfg.n_embd, cfg.layer_norm_epsilon);
  params.release_weights(layout_.final_norm_unit());

  // lm_head: tied to the embedding.
  this->head_forward(params, layout_.embedding_unit(), lnf_.data(), logits_.data(), losses_.data(), dln_.data(),
                     cfg.n_embd, cfg.vocab_size, loss_weight, backward_scale);
}

template <typename T>
void Gpt2Model<T>::backward(ParamSource<T>& params, double dloss_scale) {
  ZT_CHECK(batch_ > 0, "backward without forward");
  const auto& cfg = layout_.config();
  const int B = batch_, T_ = seq_, BT = B * T_, C = cfg.n_embd;
  const size_t BTC = size_t(BT) * C;
  const int emb_unit = layout_.embedding_unit(), final_unit = layout_.final_norm_unit();

  // lm_head (tied): the embedding unit's gradients start here and finish at the embedding.
  G* g_emb = this->head_backward(params, emb_unit, emb_unit, lnf_.data(), logits_.data(), dln_.data(), C,
                                 cfg.vocab_size, dloss_scale);

  const T* wf = params.acquire_weights(final_unit);
  G* gf = params.grad_accumulator(final_unit);
  backend_.zero_async(dres_.data(), BTC * sizeof(T), backend_.compute_stream());
  ops_.layernorm_backward(dres_.data(), gf, gf + layout_.lnf_bias_offset(), dln_.data(),
                          block_inputs_.data() + cfg.n_layer * BTC, wf, lnf_mean_.data(), lnf_rstd_.data(), BT, C);
  params.release_weights(final_unit);
  params.grads_done(final_unit);

  this->blocks_backward(params, cfg.n_layer, [&](int l) { return layout_.block_unit(l); },
                        [&](int l, const T* w, G* g) {
                          const T* x = block_inputs_.data() + l * BTC;
                          BlockActs a = block_acts(l);
                          if (checkpointing_) {
                            // Recompute this block's activations from its saved input; the output
                            // is not needed (the next block's input is already saved): scratch.
                            block_forward(w, x, dqkv_.data(), a, B, T_);
                          }
                          block_backward(w, g, x, a, dres_.data(), B, T_);
                        });

  ops_.embedding_backward(g_emb, g_emb + layout_.wpe_offset(), dres_.data(), inputs_.data(), B, T_, C);
  params.grads_done(emb_unit);
  params.backward_done();
}

template class Gpt2Model<float>;
template class Gpt2Model<double>;
template class Gpt2Model<bf16>;

}  // namespace zt
