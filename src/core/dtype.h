// The three training dtypes: fp32, bf16 and fp16, with round-to-nearest-even conversions.
// 16-bit values are stored as their bit patterns; arithmetic always happens in fp32.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace zt {

enum class DType { kF32, kBF16, kF16 };

/// Bytes per element: 4 or 2.
constexpr size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
/// "fp32", "bf16", "fp16": the names used in configs, metrics and checkpoint attributes.
const char* dtype_name(DType t);
/// Parses "fp32" / "bf16" / "fp16" (also "float32", "bfloat16", "float16"); throws UsageError.
DType parse_dtype(std::string_view name);

struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// fp32 -> bf16, round to nearest even; NaN stays NaN (quietened), infinities stay infinite.
inline bf16 to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
inline float to_float(bf16 h) { return bits_float(uint32_t(h.bits) << 16); }

/// fp32 -> fp16, round to nearest even (F16C is part of the x86-64-v3 baseline); overflow gives inf.
inline fp16 to_fp16(float f) {
  return fp16{uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))};
}
inline float to_float(fp16 h) { return _cvtsh_ss(h.bits); }
inline float to_float(float f) { return f; }

/// Converts a value of the storage type S from fp32 (the identity for float).
template <typename S>
inline S from_float(float f);
template <>
inline float from_float<float>(float f) { return f; }
template <>
inline bf16 from_float<bf16>(float f) { return to_bf16(f); }
template <>
inline fp16 from_float<fp16>(float f) { return to_fp16(f); }

// Bulk conversions, vectorised (AVX2 or AVX-512, chosen at run time) and OpenMP-parallel for
// large arrays. Rounding is round-to-nearest-even, bit-identical to the scalar functions above.
void convert(const float* src, bf16* dst, size_t n);
void convert(const float* src, fp16* dst, size_t n);
void convert(const bf16* src, float* dst, size_t n);
void convert(const fp16* src, float* dst, size_t n);
void convert(const float* src, float* dst, size_t n);

/// Converts n elements between any two dtypes given as raw pointers.
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace zt
