// DeepSpeed's symmetric quantizer, written out from its source for the tests
// (csrc/includes/quantization_utils.h: with h = 2^(bits - 1), scale h / absmax, 1 where absmax is
// 0; round half to even; clamp to [-h, h - 1]; the reciprocal of the scale sent beside the values).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace zt {

/// One block of n values: q and the scale sent (q * scale is the value on arrival).
inline void reference_quantize_block(const float* x, size_t n, int8_t* q, float* scale, int bits = 8) {
  const float h = bits == 8 ? 128.0f : 8.0f;
  float a = 0;
  for (size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  const float s = a > 0 ? h / a : 1.0f;
  *scale = 1.0f / s;
  for (size_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * s);  // the default mode: half to even
    q[i] = int8_t(r > h - 1 ? h - 1 : r < -h ? -h : r);
  }
}

}  // namespace zt
