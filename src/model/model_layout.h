// A model's named parameters: HF names and shapes, grouped into units (ParamLayout), and each
// parameter's offset in the flat buffer that holds the whole model. checkpoint/ and train/ read
// this; each architecture (Gpt2Layout, LlamaLayout) fills it in HF's order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/param_layout.h"

namespace zt {

/// Every parameter starts on a multiple of this many elements (64 bytes in fp32), so SIMD loads of
/// a tensor are aligned; the padding is zero and stays zero.
inline constexpr size_t kParamAlignment = 16;

enum class ParamInit { kNormal, kNormalResidual, kZeros, kOnes };

struct ParamInfo {
  std::string name;            ///< HF name, e.g. transformer.h.0.attn.c_attn.weight
  std::vector<int64_t> shape;  ///< HF shape ([C, 3C] for GPT-2's c_attn: Conv1D is [in, out])
  size_t offset = 0;           ///< element offset in the flat buffer
  size_t numel = 0;
  int unit = 0;
  ParamInit init = ParamInit::kZeros;
};

class ModelLayout : public ParamLayout {
 public:
  const ModelConfig& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }

  /// The parameter with this HF name; throws UsageError when there is none.
  const ParamInfo& find(const std::string& name) const;

  /// HF's _init_weights: normal (0, initializer_range) for weights and embeddings (GPT-2 scales
  /// its two residual projections by 1/sqrt(2 n_layer)), zeros for biases, ones for norm weights.
  /// Each element's value is a hash of (seed, parameter index, element index), so any slice can be
  /// initialised on its own (ZeRO-3 builds the model partitioned) and gets the same values.
  void init(uint64_t seed, float* out, size_t begin, size_t end) const override;

 protected:
  explicit ModelLayout(const ModelConfig& config) : config_(config) {}
  /// Starts the next unit at the current end of the buffer: a transformer block (whose 2-D
  /// weights are hidden matrices, TensorShape) or any other (embeddings, final norm, head).
  void begin_unit() {
    unit_offsets_.push_back(flat_size_);
    in_block_ = false;
  }
  void begin_block_unit() {
    begin_unit();
    in_block_ = true;
  }
  /// Appends a parameter to the current unit; returns its offset in the flat buffer.
  size_t add(const std::string& name, std::vector<int64_t> shape, ParamInit init);
  /// Closes the last unit and checks the count against ModelConfig::num_params.
  void finish();

  ModelConfig config_;
  std::vector<ParamInfo> params_;
  bool in_block_ = false;
};

/// The layout of the model `config` describes (its architecture's).
std::unique_ptr<ModelLayout> make_model_layout(const ModelConfig& config);

}  // namespace zt
