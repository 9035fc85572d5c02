#include "model/model_layout.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/hash.h"
#include "model/gpt2_layout.h"
#include "model/llama_layout.h"

namespace zt {

std::unique_ptr<ModelLayout> make_model_layout(const ModelConfig& config) {
  if (config.architecture() == Architecture::kLlama) return std::make_unique<LlamaLayout>(config);
  return std::make_unique<Gpt2Layout>(config);
}

size_t ModelLayout::add(const std::string& name, std::vector<int64_t> shape, ParamInit init) {
  ParamInfo p;
  p.name = name;
  p.numel = 1;
  for (int64_t d : shape) p.numel *= size_t(d);
  p.shape = std::move(shape);
  p.offset = flat_size_;
  p.unit = num_units();
  p.init = init;
  num_params_ += p.numel;
  tensor_ranges_.emplace_back(p.offset, p.offset + p.numel);
  TensorShape t;
  if (p.shape.size() == 2) {
    t.rows = size_t(p.shape[0]);
    t.cols = size_t(p.shape[1]);
    t.hidden_matrix = in_block_;
  }
  tensor_shapes_.push_back(t);
  flat_size_ = (flat_size_ + p.numel + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
  return params_.back().offset;
}

void ModelLayout::finish() {
  unit_offsets_.push_back(flat_size_);
  ZT_CHECK(int64_t(num_params_) == config_.num_params(), "layout (", num_params_, ") and ModelConfig::num_params (",
           config_.num_params(), ") disagree");
}

const ParamInfo& ModelLayout::find(const std::string& name) const {
  for (const auto& p : params_) {
    if (p.name == name) return p;
  }
  throw UsageError(cat(config_.model_type, " has no parameter named '", name, "'"));
}

void ModelLayout::init(uint64_t seed, float* flat, size_t begin, size_t end) const {
  const double stddev = config_.initializer_range;
  const double residual_std = stddev / std::sqrt(2.0 * config_.n_layer);
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    const ParamInfo& p = params_[pi];
    size_t padded_end = pi + 1 < params_.size() ? params_[pi + 1].offset : flat_size();
    size_t lo = std::max(begin, p.offset), hi = std::min(end, padded_end);
    if (lo >= hi) continue;
    const uint64_t key = mix64(seed ^ mix64(pi + 1));
    const double sd = p.init == ParamInit::kNormalResidual ? residual_std : stddev;
#pragma omp parallel for schedule(static)
    for (size_t i = lo; i < hi; ++i) {
      size_t e = i - p.offset;
      float v = 0.0f;  // padding stays zero
      if (e < p.numel) {
        switch (p.init) {
          case ParamInit::kZeros: v = 0.0f; break;
          case ParamInit::kOnes: v = 1.0f; break;
          case ParamInit::kNormal:
          case ParamInit::kNormalResidual: {
            // Box-Muller on two 53-bit uniforms drawn from the element's own hash.
            uint64_t h1 = mix64(key + 2 * e), h2 = mix64(key + 2 * e + 1);
            double u1 = (double(h1 >> 11) + 1.0) * 0x1.0p-53, u2 = double(h2 >> 11) * 0x1.0p-53;
            v = float(sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
            break;
          }
        }
      }
      flat[i - begin] = v;
    }
  }
}

}  // namespace zt
