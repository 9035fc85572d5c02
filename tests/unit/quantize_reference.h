// DeepSpeed's symmetric int8 quantizer, written out from its source for the tests
// (csrc/includes/quantization_utils.h: scale 128 / absmax, 1 where absmax is 0; round half to
// even; clamp to [-128, 127]; the reciprocal of the scale sent beside the values).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace zt {

/// One block of n values: q and the scale sent (q * scale is the value on arrival).
inline void reference_quantize_block(const float* x, size_t n, int8_t* q, float* scale) {
  float a = 0;
  for (size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  const float s = a > 0 ? 128.0f / a : 1.0f;
  *scale = 1.0f / s;
  for (size_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * s);  // the default mode: half to even
    q[i] = int8_t(r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r);
  }
}

}  // namespace zt
