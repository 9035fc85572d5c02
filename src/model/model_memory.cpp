#include "model/model_memory.h"

#include <algorithm>


namespace zt {

// Gpt2Model. Per block (kept for all L, or for one with checkpointing, which recomputes): ln1,
// qkv, attention output, residual, ln2 (7C per token), the MLP's two 4C intermediates, four
// layernorm statistics per token and the attention probabilities (H T per token), all in one
// array. Plus every block's input (one array), ln_f with its statistics, the logits and losses,
// and backward's scratch (14C per token), each its own array.
Gpt2ActivationArrays gpt2_activation_arrays(const ModelConfig& m, size_t batch, size_t seq_len,
                                            bool gradient_checkpointing) {
  const size_t B = batch, T = seq_len, BT = B * T;
  const size_t C = size_t(m.n_embd), V = size_t(m.vocab_size), H = size_t(m.n_head), L = size_t(m.n_layer);
  Gpt2ActivationArrays a;
  a.per_block = BT * (C + 3 * C + C + C + C + 4 * C + 4 * C) + 4 * BT + B * H * T * T;
  a.block_inputs = (L + 1) * BT * C;
  a.acts = (gradient_checkpointing ? 1 : L) * a.per_block;
  a.lnf = BT * C;
  a.lnf_mean = a.lnf_rstd = a.losses = BT;
  a.logits = BT * V;
  a.dres = a.dln = a.datty = BT * C;
  a.dqkv = BT * 3 * C;
  a.dfch = a.dfch_gelu = BT * 4 * C;
  return a;
}

std::vector<size_t> Gpt2ActivationArrays::elements() const {
  return {block_inputs, acts, lnf, lnf_mean, lnf_rstd, logits, losses, dres, dln, dqkv, datty, dfch, dfch_gelu};
}

// LlamaModel. Per block: the two RMSNorm outputs with their rstd, q, k and v after the rotary,
// the attention probabilities and output, the residual, and the MLP's gate, up and product.
// Plus every block's input, the final norm, logits and losses, the rotary tables, and
// backward's scratch, each its own array.
LlamaActivationArrays llama_activation_arrays(const ModelConfig& m, size_t batch, size_t seq_len,
                                              bool gradient_checkpointing) {
  const size_t B = batch, T = seq_len, BT = B * T;
  const size_t C = size_t(m.n_embd), V = size_t(m.vocab_size), H = size_t(m.n_head), L = size_t(m.n_layer);
  const size_t q = H * size_t(m.head_size()), kv = size_t(m.n_kv_head) * size_t(m.head_size());
  const size_t I = size_t(m.intermediate_size);
  LlamaActivationArrays a;
  a.per_block = BT * (C + q + 2 * kv + q + C + C + 3 * I) + 2 * BT + B * H * T * T;
  a.block_inputs = (L + 1) * BT * C;
  a.acts = (gradient_checkpointing ? 1 : L) * a.per_block;
  a.lnf = BT * C;
  a.lnf_rstd = a.losses = BT;
  a.logits = BT * V;
  a.rope_cos = a.rope_sin = T * size_t(m.head_size() / 2);
  a.dres = a.dln = BT * C;
  a.datty = a.dq = BT * q;
  a.dk = a.dv = BT * kv;
  a.dh = a.dgate = a.dup = BT * I;
  return a;
}

std::vector<size_t> LlamaActivationArrays::elements() const {
  return {block_inputs, acts, lnf, lnf_rstd, logits, losses, rope_cos, rope_sin,
          dres, dln,  datty, dq,       dk,     dv,     dh,       dgate,    dup};
}

std::vector<size_t> activation_allocations(const ModelConfig& m, size_t batch, size_t seq_len,
                                           bool gradient_checkpointing) {
  std::vector<size_t> bytes = m.architecture() == Architecture::kLlama
                                  ? llama_activation_arrays(m, batch, seq_len, gradient_checkpointing).elements()
                                  : gpt2_activation_arrays(m, batch, seq_len, gradient_checkpointing).elements();
  for (size_t& b : bytes) b *= sizeof(float);  // the model computes in fp32
  return bytes;
}

size_t activation_bytes(const ModelConfig& m, size_t batch, size_t seq_len, bool gradient_checkpointing) {
  size_t total = 0;
  for (size_t b : activation_allocations(m, batch, seq_len, gradient_checkpointing)) total += b;
  return total;
}

int64_t largest_layer_params(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.n_positions;
  if (m.architecture() == Architecture::kLlama) {
    const int64_t q = int64_t(m.n_head) * m.head_size(), I = m.intermediate_size;
    const int64_t bias = m.attention_bias || m.qkv_bias ? q : 0, mlp_bias = m.mlp_bias ? I : 0;
    return std::max({V * C, C * q + bias, C * I + mlp_bias});
  }
  return std::max({V * C, P * C, 3 * C * C + 3 * C, 4 * C * C + 4 * C, 4 * C * C + C});
}

}  // namespace zt
