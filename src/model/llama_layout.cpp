#include "model/llama_layout.h"

namespace zt {

LlamaLayout::LlamaLayout(const ModelConfig& config) : ModelLayout(config) {
  const int64_t C = config.n_embd, V = config.vocab_size, I = config.intermediate_size;
  const int64_t q = int64_t(config.n_head) * config.head_size(), kv = int64_t(config.n_kv_head) * config.head_size();
  const bool qkv_bias = config.attention_bias || config.qkv_bias;
  begin_unit();
  add("model.embed_tokens.weight", {V, C}, ParamInit::kNormal);
  for (int l = 0; l < config.n_layer; ++l) {
    begin_block_unit();
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const size_t base = flat_size_;
    auto weight = [&](const std::string& name, int64_t out, int64_t in) {
      return add(p + name + ".weight", {out, in}, ParamInit::kNormal) - base;
    };
    auto bias = [&](const std::string& name, int64_t out, bool present) {
      return present ? add(p + name + ".bias", {out}, ParamInit::kZeros) - base : LlamaBlockOffsets::kNone;
    };
    LlamaBlockOffsets b{};
    // HF's registration order: self_attn, mlp, then the two norms; each weight then its bias.
    b.q = weight("self_attn.q_proj", q, C);
    b.q_bias = bias("self_attn.q_proj", q, qkv_bias);
    b.k = weight("self_attn.k_proj", kv, C);
    b.k_bias = bias("self_attn.k_proj", kv, qkv_bias);
    b.v = weight("self_attn.v_proj", kv, C);
    b.v_bias = bias("self_attn.v_proj", kv, qkv_bias);
    b.o = weight("self_attn.o_proj", C, q);
    b.o_bias = bias("self_attn.o_proj", C, config.attention_bias);
    b.gate = weight("mlp.gate_proj", I, C);
    b.gate_bias = bias("mlp.gate_proj", I, config.mlp_bias);
    b.up = weight("mlp.up_proj", I, C);
    b.up_bias = bias("mlp.up_proj", I, config.mlp_bias);
    b.down = weight("mlp.down_proj", C, I);
    b.down_bias = bias("mlp.down_proj", C, config.mlp_bias);
    b.input_norm = add(p + "input_layernorm.weight", {C}, ParamInit::kOnes) - base;
    b.post_norm = add(p + "post_attention_layernorm.weight", {C}, ParamInit::kOnes) - base;
    block_ = b;
  }
  begin_unit();
  add("model.norm.weight", {C}, ParamInit::kOnes);
  if (!config.tie_word_embeddings) {
    begin_unit();
    add("lm_head.weight", {V, C}, ParamInit::kNormal);
  }
  finish();
  tied_unit_ = config.tie_word_embeddings ? embedding_unit() : -1;
}

}  // namespace zt
