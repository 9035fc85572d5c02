#include "model/rope.h"

#include <cmath>

namespace zt {

std::vector<float> rope_inv_freq(const ModelConfig& m) {
  const int dim = m.head_size();
  std::vector<float> inv(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    // torch: arange(0, dim, 2).float() / dim, base ** that, 1.0 / that, each step in fp32.
    const float exponent = float(2 * i) / float(dim);
    inv[size_t(i)] = 1.0f / std::pow(float(m.rope_theta), exponent);
  }
  const RopeScaling& r = m.rope_scaling;
  if (r.type != RopeScaling::Type::kLlama3) return inv;
  // Llama 3.1's scaling (HF's _compute_llama3_parameters): long wavelengths are divided by the
  // factor, short ones kept, and the band between blended smoothly.
  const float factor = float(r.factor), low = float(r.low_freq_factor), high = float(r.high_freq_factor);
  const float old_len = float(r.original_max_position_embeddings);
  const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (float& f : inv) {
    const float wavelen = 2.0f * float(M_PI) / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
      continue;
    }
    const float smooth = (old_len / wavelen - low) / (high - low);
    f = (1.0f - smooth) * f / factor + smooth * f;
  }
  return inv;
}

void rope_tables(const ModelConfig& m, int positions, std::vector<double>& cos, std::vector<double>& sin) {
  const std::vector<float> inv = rope_inv_freq(m);
  const size_t half = inv.size();
  cos.assign(size_t(positions) * half, 0.0);
  sin.assign(size_t(positions) * half, 0.0);
  const float factor = m.rope_scaling.type == RopeScaling::Type::kLinear ? float(m.rope_scaling.factor) : 1.0f;
  for (int t = 0; t < positions; ++t) {
    const float pos = float(t) / factor;
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * inv[i];
      cos[size_t(t) * half + i] = std::cos(double(angle));
      sin[size_t(t) * half + i] = std::sin(double(angle));
    }
  }
}

}  // namespace zt
