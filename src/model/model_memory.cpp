#include "model/model_memory.h"

#include <algorithm>

#include "model/gpt2_layout.h"

namespace zt {

std::unique_ptr<ParamLayout> make_param_layout(const ModelConfig& config) {
  return std::make_unique<Gpt2Layout>(config);
}

// Gpt2Model (fp32). Per block (kept for all L, or for one with checkpointing, which recomputes):
// ln1, qkv, attention output, residual, ln2 (7C per token), the MLP's two 4C intermediates, four
// layernorm statistics per token and the attention probabilities (H T per token). Plus every
// block's input, ln_f, the logits and losses, and backward's scratch (14C per token).
size_t activation_bytes(const ModelConfig& m, size_t batch, size_t seq_len, bool gradient_checkpointing) {
  const size_t B = batch, T = seq_len, BT = B * T;
  const size_t C = size_t(m.n_embd), V = size_t(m.vocab_size), H = size_t(m.n_head), L = size_t(m.n_layer);
  const size_t per_block = BT * 15 * C + 4 * BT + B * H * T * T;
  const size_t kept_blocks = gradient_checkpointing ? 1 : L;
  const size_t elements = (L + 1) * BT * C + kept_blocks * per_block + BT * C + 3 * BT + BT * V + 14 * BT * C;
  return elements * sizeof(float);
}

int64_t largest_layer_params(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.n_positions;
  return std::max({V * C, P * C, 3 * C * C + 3 * C, 4 * C * C + 4 * C, 4 * C * C + C});
}

}  // namespace zt
