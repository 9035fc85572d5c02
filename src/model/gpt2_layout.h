// The GPT-2 parameter registry: HF names and shapes, grouped into units, and each parameter's
// offset in the flat buffer that holds the whole model.
//
// Units (ParamLayout) are what the ZeRO engine gathers, releases and reduces as one piece:
//   unit 0          transformer.wte.weight [V, C], transformer.wpe.weight [P, C]
//   unit 1 + l      transformer.h.<l>.*  (12 tensors, HF's order)
//   unit L + 1      transformer.ln_f.weight, transformer.ln_f.bias
// The lm_head is tied to wte and has no storage of its own: unit 0 is the tied unit. Every parameter starts on a
// multiple of kParamAlignment elements (64 bytes in fp32) so SIMD loads of a tensor are aligned;
// the padding is zero and stays zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/param_layout.h"

namespace zt {

inline constexpr size_t kParamAlignment = 16;

enum class ParamInit { kNormal, kNormalResidual, kZeros, kOnes };

struct ParamInfo {
  std::string name;             ///< HF name, e.g. transformer.h.0.attn.c_attn.weight
  std::vector<int64_t> shape;   ///< HF shape ([C, 3C] for c_attn.weight: Conv1D is [in, out])
  size_t offset = 0;            ///< element offset in the flat buffer
  size_t numel = 0;
  int unit = 0;
  ParamInit init = ParamInit::kZeros;
};

/// Offsets of one transformer block's tensors, relative to the block's unit offset.
struct BlockOffsets {
  size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

class Gpt2Layout final : public ParamLayout {
 public:
  explicit Gpt2Layout(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_norm_unit() const { return config_.n_layer + 1; }

  /// Offsets inside unit 0: wte at 0, wpe after it.
  size_t wpe_offset() const { return wpe_offset_; }
  /// Offsets inside a block unit (the same for every block).
  const BlockOffsets& block() const { return block_; }
  /// Offsets inside the final unit: ln_f weight at 0, bias after it.
  size_t lnf_bias_offset() const { return lnf_bias_offset_; }

  /// The parameter with this HF name; throws UsageError when there is none.
  const ParamInfo& find(const std::string& name) const;

  /// init_gpt2_params.
  void init(uint64_t seed, float* out, size_t begin, size_t end) const override;

 private:
  size_t add(const std::string& name, std::vector<int64_t> shape, int unit, ParamInit init);

  ModelConfig config_;
  std::vector<ParamInfo> params_;
  size_t wpe_offset_ = 0, lnf_bias_offset_ = 0;
  BlockOffsets block_{};
};

/// Fills a flat buffer (fp32) with GPT-2's initialisation, as HF's _init_weights does: normal
/// (0, initializer_range) for weights and embeddings, scaled by 1/sqrt(2 n_layer) for the two
/// residual projections, zeros for biases, ones for layernorm weights. Each element's value is a
/// hash of (seed, parameter index, element index), so any slice can be initialised on its own
/// (ZeRO-3 builds the model partitioned) and gets the same values. Fills [begin, end) only.
void init_gpt2_params(const Gpt2Layout& layout, uint64_t seed, float* flat, size_t begin, size_t end);

}  // namespace zt
