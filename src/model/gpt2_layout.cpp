#include "model/gpt2_layout.h"

namespace zt {

Gpt2Layout::Gpt2Layout(const ModelConfig& config) : ModelLayout(config) {
  const int64_t C = config.n_embd, V = config.vocab_size, P = config.n_positions;
  begin_unit();
  add("transformer.wte.weight", {V, C}, ParamInit::kNormal);
  wpe_offset_ = add("transformer.wpe.weight", {P, C}, ParamInit::kNormal);
  for (int l = 0; l < config.n_layer; ++l) {
    begin_block_unit();
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const size_t base = flat_size_;
    BlockOffsets b{};
    b.ln1_w = add(p + "ln_1.weight", {C}, ParamInit::kOnes) - base;
    b.ln1_b = add(p + "ln_1.bias", {C}, ParamInit::kZeros) - base;
    b.attn_w = add(p + "attn.c_attn.weight", {C, 3 * C}, ParamInit::kNormal) - base;
    b.attn_b = add(p + "attn.c_attn.bias", {3 * C}, ParamInit::kZeros) - base;
    b.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, ParamInit::kNormalResidual) - base;
    b.attn_proj_b = add(p + "attn.c_proj.bias", {C}, ParamInit::kZeros) - base;
    b.ln2_w = add(p + "ln_2.weight", {C}, ParamInit::kOnes) - base;
    b.ln2_b = add(p + "ln_2.bias", {C}, ParamInit::kZeros) - base;
    b.fc_w = add(p + "mlp.c_fc.weight", {C, 4 * C}, ParamInit::kNormal) - base;
    b.fc_b = add(p + "mlp.c_fc.bias", {4 * C}, ParamInit::kZeros) - base;
    b.fc_proj_w = add(p + "mlp.c_proj.weight", {4 * C, C}, ParamInit::kNormalResidual) - base;
    b.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, ParamInit::kZeros) - base;
    block_ = b;
  }
  begin_unit();
  const size_t lnf_base = flat_size_;
  add("transformer.ln_f.weight", {C}, ParamInit::kOnes);
  lnf_bias_offset_ = add("transformer.ln_f.bias", {C}, ParamInit::kZeros) - lnf_base;
  finish();
  tied_unit_ = embedding_unit();  // wte is the lm_head too
}

}  // namespace zt
