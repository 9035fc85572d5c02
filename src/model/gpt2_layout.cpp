#include "model/gpt2_layout.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/hash.h"

namespace zt {

Gpt2Layout::Gpt2Layout(const ModelConfig& config) : config_(config) {
  const int64_t C = config.n_embd, V = config.vocab_size, P = config.n_positions;
  unit_offsets_.push_back(0);
  add("transformer.wte.weight", {V, C}, 0, ParamInit::kNormal);
  wpe_offset_ = add("transformer.wpe.weight", {P, C}, 0, ParamInit::kNormal);
  for (int l = 0; l < config.n_layer; ++l) {
    unit_offsets_.push_back(flat_size_);
    const int u = 1 + l;
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const size_t base = flat_size_;
    BlockOffsets b{};
    b.ln1_w = add(p + "ln_1.weight", {C}, u, ParamInit::kOnes) - base;
    b.ln1_b = add(p + "ln_1.bias", {C}, u, ParamInit::kZeros) - base;
    b.attn_w = add(p + "attn.c_attn.weight", {C, 3 * C}, u, ParamInit::kNormal) - base;
    b.attn_b = add(p + "attn.c_attn.bias", {3 * C}, u, ParamInit::kZeros) - base;
    b.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, u, ParamInit::kNormalResidual) - base;
    b.attn_proj_b = add(p + "attn.c_proj.bias", {C}, u, ParamInit::kZeros) - base;
    b.ln2_w = add(p + "ln_2.weight", {C}, u, ParamInit::kOnes) - base;
    b.ln2_b = add(p + "ln_2.bias", {C}, u, ParamInit::kZeros) - base;
    b.fc_w = add(p + "mlp.c_fc.weight", {C, 4 * C}, u, ParamInit::kNormal) - base;
    b.fc_b = add(p + "mlp.c_fc.bias", {4 * C}, u, ParamInit::kZeros) - base;
    b.fc_proj_w = add(p + "mlp.c_proj.weight", {4 * C, C}, u, ParamInit::kNormalResidual) - base;
    b.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, u, ParamInit::kZeros) - base;
    block_ = b;
  }
  unit_offsets_.push_back(flat_size_);
  const size_t lnf_base = flat_size_;
  add("transformer.ln_f.weight", {C}, config.n_layer + 1, ParamInit::kOnes);
  lnf_bias_offset_ = add("transformer.ln_f.bias", {C}, config.n_layer + 1, ParamInit::kZeros) - lnf_base;
  unit_offsets_.push_back(flat_size_);
  tied_unit_ = embedding_unit();  // wte is the lm_head too
  ZT_CHECK(int64_t(num_params_) == config.num_params(), "layout and ModelConfig::num_params disagree");
}

size_t Gpt2Layout::add(const std::string& name, std::vector<int64_t> shape, int unit, ParamInit init) {
  ParamInfo p;
  p.name = name;
  p.numel = 1;
  for (int64_t d : shape) p.numel *= size_t(d);
  p.shape = std::move(shape);
  p.offset = flat_size_;
  p.unit = unit;
  p.init = init;
  num_params_ += p.numel;
  flat_size_ = (flat_size_ + p.numel + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  params_.push_back(std::move(p));
  return params_.back().offset;
}

void Gpt2Layout::init(uint64_t seed, float* out, size_t begin, size_t end) const {
  init_gpt2_params(*this, seed, out, begin, end);
}

const ParamInfo& Gpt2Layout::find(const std::string& name) const {
  for (const auto& p : params_) {
    if (p.name == name) return p;
  }
  throw UsageError(cat("GPT-2 has no parameter named '", name, "'"));
}

void init_gpt2_params(const Gpt2Layout& layout, uint64_t seed, float* flat, size_t begin, size_t end) {
  const auto& cfg = layout.config();
  const double stddev = cfg.initializer_range;
  const double residual_std = stddev / std::sqrt(2.0 * cfg.n_layer);
  const auto& params = layout.params();
  for (size_t pi = 0; pi < params.size(); ++pi) {
    const ParamInfo& p = params[pi];
    size_t padded_end = pi + 1 < params.size() ? params[pi + 1].offset : layout.flat_size();
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
