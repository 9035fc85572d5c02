// What the ZeRO engine knows of a model: a flat buffer of parameters cut into units, and how to
// initialise any slice of it. zero/ reads only this; each architecture (Gpt2Layout) derives from
// it and fills the units in its own order.
//
// A unit is what the engine gathers, releases and reduces as one piece (an embedding, a block,
// a final norm). Units are contiguous and in flat-buffer order; their gradients finish from the
// last unit down to the first. The tied unit is the one the model uses at both ends of a step
// (tied input and output embeddings), so a working copy of it is kept apart from the others.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace zt {

/// A tensor as the optimizers that need its shape see it (Muon; Lamb needs only its range).
struct TensorShape {
  size_t rows = 0, cols = 0;  ///< HF's stored shape of a 2-D tensor; 0 x 0 for any other
  /// A weight matrix inside a transformer block: what Muon orthogonalises. Embeddings, heads,
  /// norms and biases are not (DeepSpeed's MuonWithAuxAdam steps them with AdamW).
  bool hidden_matrix = false;
  /// A 2-D tensor: what Adafactor factors (transformers' and torch's: two dimensions or more).
  bool matrix() const { return rows > 0 && cols > 0; }
};

class ParamLayout {
 public:
  virtual ~ParamLayout() = default;

  /// Ψ: parameters without padding.
  size_t num_params() const { return num_params_; }
  /// Elements in the flat buffer, padding included.
  size_t flat_size() const { return flat_size_; }
  int num_units() const { return int(unit_offsets_.size()) - 1; }
  size_t unit_offset(int unit) const { return unit_offsets_[size_t(unit)]; }
  size_t unit_size(int unit) const { return unit_offsets_[size_t(unit) + 1] - unit_offsets_[size_t(unit)]; }
  size_t max_unit_size() const {
    size_t m = 0;
    for (int u = 0; u < num_units(); ++u) m = std::max(m, unit_size(u));
    return m;
  }
  /// The unit used at both ends of a step, or -1 when none is.
  int tied_unit() const { return tied_unit_; }
  /// The largest unit but the tied one.
  size_t max_untied_unit_size() const {
    size_t m = 0;
    for (int u = 0; u < num_units(); ++u) {
      if (u != tied_unit_) m = std::max(m, unit_size(u));
    }
    return m;
  }

  /// Each tensor's flat [begin, end), in flat-buffer order (the gaps between them are alignment
  /// padding): what an optimizer with per-tensor statistics (Lamb's trust ratios) steps by.
  const std::vector<std::pair<size_t, size_t>>& tensor_ranges() const { return tensor_ranges_; }
  /// Each tensor's shape, in the same order as tensor_ranges().
  const std::vector<TensorShape>& tensor_shapes() const { return tensor_shapes_; }

  /// Writes the model's initial values of flat elements [begin, end) into out[0, end - begin)
  /// (fp32) from `seed`. Any slice alone gets the same values as the whole, so that ZeRO-3
  /// initialises only a rank's partition.
  virtual void init(uint64_t seed, float* out, size_t begin, size_t end) const = 0;

 protected:
  ParamLayout() = default;
  ParamLayout(const ParamLayout&) = default;
  ParamLayout& operator=(const ParamLayout&) = default;

  std::vector<size_t> unit_offsets_;  ///< num_units + 1 entries, the last is flat_size
  std::vector<std::pair<size_t, size_t>> tensor_ranges_;
  std::vector<TensorShape> tensor_shapes_;
  size_t num_params_ = 0, flat_size_ = 0;
  int tied_unit_ = -1;
};

}  // namespace zt
