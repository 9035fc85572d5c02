#include "core/dtype.h"

#include <omp.h>

#include <algorithm>

#include "core/cpu_features.h"
#include "core/error.h"

namespace zt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  throw UsageError(cat("unknown dtype '", name, "' (expected fp32, bf16 or fp16)"));
}

namespace {

// --- AVX2 (baseline) ---------------------------------------------------------------------------

void f32_to_bf16_avx2(const float* src, bf16* dst, size_t n) {
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), is_nan);
    r = _mm256_srli_epi32(r, 16);
    // Pack 8 x u32 -> 8 x u16 (packus works per 128-bit lane, so fix the order after).
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

void bf16_to_f32_avx2(const bf16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(u));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

void f32_to_f16_avx2(const float* src, fp16* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_fp16(src[i]);
}

void f16_to_f32_avx2(const fp16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

// --- AVX-512 -----------------------------------------------------------------------------------

#define ZT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

ZT_AVX512 void f32_to_bf16_avx512(const float* src, bf16* dst, size_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, lsb));
    r = _mm512_mask_or_epi32(r, is_nan, u, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

ZT_AVX512 void bf16_to_f32_avx512(const bf16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(u));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

ZT_AVX512 void f32_to_f16_avx512(const float* src, fp16* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_fp16(src[i]);
}

ZT_AVX512 void f16_to_f32_avx512(const fp16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

// Splits [0, n) into per-thread chunks for arrays big enough to be worth it; below that the
// OpenMP fork costs more than the copy.
template <typename Src, typename Dst, typename Fn>
void parallel_convert(const Src* src, Dst* dst, size_t n, Fn fn) {
  constexpr size_t kMinPerThread = 1 << 16;
  if (n < 2 * kMinPerThread || omp_in_parallel()) {
    fn(src, dst, n);
    return;
  }
#pragma omp parallel
  {
    size_t threads = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    size_t chunk = (n / threads + 63) & ~size_t(63);
    size_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (end > begin) fn(src + begin, dst + begin, end - begin);
  }
}

bool use_avx512() { return active_cpu_isa() == CpuIsa::kAvx512; }

}  // namespace

void convert(const float* src, bf16* dst, size_t n) {
  parallel_convert(src, dst, n, use_avx512() ? f32_to_bf16_avx512 : f32_to_bf16_avx2);
}
void convert(const float* src, fp16* dst, size_t n) {
  parallel_convert(src, dst, n, use_avx512() ? f32_to_f16_avx512 : f32_to_f16_avx2);
}
void convert(const bf16* src, float* dst, size_t n) {
  parallel_convert(src, dst, n, use_avx512() ? bf16_to_f32_avx512 : bf16_to_f32_avx2);
}
void convert(const fp16* src, float* dst, size_t n) {
  parallel_convert(src, dst, n, use_avx512() ? f16_to_f32_avx512 : f16_to_f32_avx2);
}
void convert(const float* src, float* dst, size_t n) {
  if (src != dst) std::memcpy(dst, src, n * sizeof(float));
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    if (src != dst) std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  ZT_CHECK(src_type == DType::kF32 || dst_type == DType::kF32,
           "conversion between two 16-bit types goes through fp32: ", dtype_name(src_type), " -> ",
           dtype_name(dst_type));
  auto* f_src = static_cast<const float*>(src);
  auto* f_dst = static_cast<float*>(dst);
  switch (src_type == DType::kF32 ? dst_type : src_type) {
    case DType::kBF16:
      if (src_type == DType::kF32) convert(f_src, static_cast<bf16*>(dst), n);
      else convert(static_cast<const bf16*>(src), f_dst, n);
      break;
    case DType::kF16:
      if (src_type == DType::kF32) convert(f_src, static_cast<fp16*>(dst), n);
      else convert(static_cast<const fp16*>(src), f_dst, n);
      break;
    case DType::kF32: break;
  }
}

}  // namespace zt
