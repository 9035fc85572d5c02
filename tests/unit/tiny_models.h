// The small models the unit tests train in milliseconds: GPT-2 (2 layers, 32 wide, vocab 64),
// and the Llama family on the same shape.
#pragma once

#include "config/model_config.h"

namespace zt::testing {

inline ModelConfig tiny_gpt2() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_head = 2;
  c.n_positions = 16;
  c.vocab_size = 64;
  return c;
}

/// 4 query heads on 2 kv heads: RMSNorm, rotary, grouped-query attention and SwiGLU.
inline ModelConfig tiny_llama() {
  ModelConfig c = tiny_gpt2();
  c.model_type = "llama";
  c.n_kv_head = 2;
  c.n_head = 4;
  c.intermediate_size = 48;
  c.layer_norm_epsilon = 1e-6;
  return c;
}

}  // namespace zt::testing
