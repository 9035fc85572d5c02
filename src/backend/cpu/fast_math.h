// exp for the float kernels, written so that the compiler vectorises it (libm's expf is a scalar
// call; GCC only maps it to libmvec under -ffast-math, which we do not want globally). Range
// reduction to [-ln2/2, ln2/2] plus a degree-6 polynomial: about 2 ulp, which the gradient and
// cross-backend tests bound. The double versions use libm: they serve the gradient checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace zt::cpu {

inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round x / ln2 to nearest with the 1.5 * 2^23 trick (vectorises, unlike nearbyint).
  float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693145751953125f;  // ln2 split in two parts for exact products
  r = r - k * 1.428606765330187045e-06f;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666671633720398f +
            r * (0.0416666418313980103f + r * (0.00833336077630519867f + r * 0.00138888892251998186f)))));
  int32_t bits = (int32_t(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}
inline double vexp(double x) { return std::exp(x); }

}  // namespace zt::cpu
