// fp32 <-> bf16 / fp16 conversions: round to nearest even, specials, and the vectorised paths
// (AVX2 and AVX-512) agreeing bit for bit with the scalar definition.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory_pool.h"

namespace zt {
namespace {

// An independent bf16 rounding: nearest representable by exhaustive comparison of neighbours.
uint16_t reference_bf16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return 0;  // checked separately
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  double d = f, dl = bits_float(lo), dh = bits_float(hi);
  double el = std::fabs(d - dl), eh = std::fabs(dh - d);  // finite inputs well inside the range
  if (el < eh) return uint16_t(lo >> 16);
  if (eh < el) return uint16_t(hi >> 16);
  return uint16_t(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);  // tie: even
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: ties to even (up).
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits, 0x3f81);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(to_float(to_bf16(bits_float(0x7f800001u)))));  // a NaN that rounding would turn into inf
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1000, 1000);
  for (int i = 0; i < 100000; ++i) {
    float f = d(rng);
    ASSERT_EQ(to_bf16(f).bits, reference_bf16(f)) << f;
  }
}

TEST(Dtype, Fp16RoundsToNearestEvenAndOverflows) {
  EXPECT_EQ(to_fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(to_fp16(65504.0f).bits, 0x7bff);  // largest finite half
  EXPECT_EQ(to_fp16(65520.0f).bits, 0x7c00);  // halfway to the next binade rounds up to inf
  EXPECT_EQ(to_fp16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);  // tie to even
  EXPECT_EQ(to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_EQ(to_float(to_fp16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
}

// ctest runs this binary twice: as is (AVX-512 where present) and with ZT_CPU_ISA=avx2.
TEST(DtypeBulk, VectorPathsMatchScalar) {
  // n not a multiple of any vector width, and large enough for the parallel path.
  const size_t n = (1 << 18) + 13;
  std::vector<float> src(n);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-70000, 70000);
  for (auto& x : src) x = d(rng);
  src[5] = std::numeric_limits<float>::infinity();
  src[6] = std::nanf("");
  src[7] = 65519.99f;
  std::vector<bf16> b(n);
  std::vector<fp16> h(n);
  convert(src.data(), b.data(), n);
  convert(src.data(), h.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i].bits, to_bf16(src[i]).bits) << i;
    ASSERT_EQ(h[i].bits, to_fp16(src[i]).bits) << i;
  }
  std::vector<float> back(n);
  convert(b.data(), back.data(), n);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isnan(src[i])) {
      ASSERT_EQ(back[i], to_float(b[i])) << i;
    }
  }
  convert(h.data(), back.data(), n);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isnan(src[i])) {
      ASSERT_EQ(back[i], to_float(h[i])) << i;
    }
  }
}

TEST(Dtype, Names) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("float16"), DType::kF16);
  EXPECT_STREQ(dtype_name(DType::kF32), "fp32");
  EXPECT_THROW(parse_dtype("fp8"), UsageError);
}

TEST(MemoryPool, CountsBytesAndPeaks) {
  // Through the CPU backend, which allocates every pool with pool_alloc and frees with pool_free.
  auto backend = make_cpu_backend();
  const size_t before = pool_counter(Pool::kHost).in_use();
  reset_pool_peaks();
  {
    DeviceArray<float> a(*backend, 1000, Pool::kHost);
    DeviceArray<float> b(*backend, 500, Pool::kHost);
    EXPECT_EQ(pool_counter(Pool::kHost).in_use(), before + 6000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  }
  EXPECT_EQ(pool_counter(Pool::kHost).in_use(), before);
  EXPECT_EQ(pool_peaks()[Pool::kHost], before + 6000);
  reset_pool_peaks();
  EXPECT_EQ(pool_peaks()[Pool::kHost], before);
}

}  // namespace
}  // namespace zt
