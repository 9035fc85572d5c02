// The GPT-2 parameter registry (ModelLayout) in HF's names and order:
//   unit 0          transformer.wte.weight [V, C], transformer.wpe.weight [P, C]
//   unit 1 + l      transformer.h.<l>.*  (12 tensors, HF's order)
//   unit L + 1      transformer.ln_f.weight, transformer.ln_f.bias
// The lm_head is tied to wte and has no storage of its own: unit 0 is the tied unit.
#pragma once

#include "model/model_layout.h"

namespace zt {

/// Offsets of one transformer block's tensors, relative to the block's unit offset.
struct BlockOffsets {
  size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

class Gpt2Layout final : public ModelLayout {
 public:
  explicit Gpt2Layout(const ModelConfig& config);

  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_norm_unit() const { return config_.n_layer + 1; }

  /// Offsets inside unit 0: wte at 0, wpe after it.
  size_t wpe_offset() const { return wpe_offset_; }
  /// Offsets inside a block unit (the same for every block).
  const BlockOffsets& block() const { return block_; }
  /// Offsets inside the final unit: ln_f weight at 0, bias after it.
  size_t lnf_bias_offset() const { return lnf_bias_offset_; }

 private:
  size_t wpe_offset_ = 0, lnf_bias_offset_ = 0;
  BlockOffsets block_{};
};

}  // namespace zt
