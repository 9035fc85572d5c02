// The Llama family's parameter registry (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM:
// the same names), in HF's order:
//   unit 0          model.embed_tokens.weight [V, C]
//   unit 1 + l      model.layers.<l>.*: self_attn.{q,k,v,o}_proj (+ biases where the config
//                   has them), mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm
//   unit L + 1      model.norm.weight
//   unit L + 2      lm_head.weight [V, C], only when tie_word_embeddings is false
// Linear weights are nn.Linear's [out, in]. Tied, unit 0 is the tied unit (the lm_head reads
// embed_tokens); untied, no unit is used at both ends.
#pragma once

#include "model/model_layout.h"

namespace zt {

/// Offsets of one block's tensors, relative to the block's unit offset; kNone where the config
/// has no such bias.
struct LlamaBlockOffsets {
  static constexpr size_t kNone = ~size_t(0);
  size_t input_norm, q, q_bias, k, k_bias, v, v_bias, o, o_bias, post_norm;
  size_t gate, gate_bias, up, up_bias, down, down_bias;
};

class LlamaLayout final : public ModelLayout {
 public:
  explicit LlamaLayout(const ModelConfig& config);

  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_norm_unit() const { return config_.n_layer + 1; }
  /// The unit holding the lm_head's weight (at its offset 0): the embedding when tied.
  int lm_head_unit() const { return config_.tie_word_embeddings ? 0 : config_.n_layer + 2; }
  const LlamaBlockOffsets& block() const { return block_; }

 private:
  LlamaBlockOffsets block_{};
};

}  // namespace zt
