#include "model/model_memory.h"

#include <algorithm>

#include "model/gpt2_layout.h"

namespace zt {

std::unique_ptr<ParamLayout> make_param_layout(const ModelConfig& config) {
  return std::make_unique<Gpt2Layout>(config);
}

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

std::vector<size_t> activation_allocations(const ModelConfig& m, size_t batch, size_t seq_len,
                                           bool gradient_checkpointing) {
  std::vector<size_t> bytes = gpt2_activation_arrays(m, batch, seq_len, gradient_checkpointing).elements();
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
  return std::max({V * C, P * C, 3 * C * C + 3 * C, 4 * C * C + 4 * C, 4 * C * C + C});
}

}  // namespace zt
