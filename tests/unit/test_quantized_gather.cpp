// ZeRO++'s quantization (OptimizerOps::quantize / dequantize: qwZ's int8, qgZ's int4) against
// DeepSpeed's symmetric quantizer written out (quantize_reference.h: scale 2^(bits-1) / absmax,
// round half to even, clamp, the reciprocal sent), and the packets of a quantized collective
// (zero/quantized_gather.h) laid out and read back rank by rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "core/dtype.h"
#include "quantize_reference.h"
#include "random_test_util.h"
#include "zero/quantized_gather.h"

namespace zt {
namespace {

// `values` rounded to `dtype`, as the kernels read them, and their bits.
struct Input {
  std::vector<float> exact;           // what the kernel sees
  std::vector<unsigned char> stored;  // in `dtype`
};

Input input_in(DType dtype, const std::vector<float>& values) {
  Input in;
  in.stored.resize(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    float v = values[i];
    if (dtype == DType::kBF16) {
      const bf16 h = to_bf16(v);
      std::memcpy(in.stored.data() + 2 * i, &h, 2);
      v = to_float(h);
    } else if (dtype == DType::kF16) {
      const fp16 h = to_fp16(v);
      std::memcpy(in.stored.data() + 2 * i, &h, 2);
      v = to_float(h);
    } else {
      std::memcpy(in.stored.data() + 4 * i, &v, 4);
    }
    in.exact.push_back(v);
  }
  return in;
}

// Values with the cases that matter: a block of zeros, exact halves (ties), the block's largest
// magnitude on either sign (clamped to 127 when positive), a short last block.
std::vector<float> test_values(size_t n) {
  std::vector<float> v = randn<float>(n, 91, 0.05f);
  for (size_t i = kQuantBlock; i < std::min(n, 2 * kQuantBlock); ++i) v[i] = 0.0f;  // block 1: zeros
  if (n > 3 * kQuantBlock) {
    // Block 2: largest magnitude 128, so s = 1 and x s = x: ties at 2.5 -> 2, 3.5 -> 4, -0.5 -> -0.
    float* b = v.data() + 2 * kQuantBlock;
    for (size_t i = 0; i < kQuantBlock; ++i) b[i] = float(int(i % 200) - 100) * 0.5f;
    b[7] = 128.0f;
    b[8] = -128.0f;
  }
  v[3] = -0.2f;  // block 0's largest magnitude, negative: q = -128
  return v;
}

TEST(QuantizeInt8, DeepSpeedsSymmetricRule) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const size_t n = 3 * kQuantBlock + 517;  // a short last block
  const size_t blocks = QuantizedSplit::blocks(n);
  ASSERT_EQ(blocks, 4u);
  const std::vector<float> values = test_values(n);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Input in = input_in(dtype, values);
    std::vector<int8_t> want_q(n);
    std::vector<float> want_scales(blocks);
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lo = b * kQuantBlock;
      const size_t count = std::min(kQuantBlock, n - lo);
      reference_quantize_block(in.exact.data() + lo, count, want_q.data() + lo, &want_scales[b]);
    }
    DeviceArray<unsigned char> x(*cpu, in.stored.size()), back(*cpu, in.stored.size());
    DeviceArray<int8_t> q(*cpu, n);
    DeviceArray<float> scales(*cpu, blocks);
    cpu->copy_from_host(x.data(), in.stored.data(), in.stored.size());
    cpu->optimizer_ops().quantize(x.data(), dtype, n, kQuantBlock, 8, q.data(), scales.data());
    cpu->optimizer_ops().dequantize(q.data(), scales.data(), n, kQuantBlock, 8, back.data(), dtype);
    std::vector<int8_t> got_q(n);
    std::vector<float> got_scales(blocks);
    std::vector<unsigned char> got_back(in.stored.size());
    cpu->copy_to_host(got_q.data(), q.data(), n);
    cpu->copy_to_host(got_scales.data(), scales.data(), blocks * 4);
    cpu->copy_to_host(got_back.data(), back.data(), got_back.size());
    for (size_t b = 0; b < blocks; ++b) EXPECT_EQ(got_scales[b], want_scales[b]) << "block " << b;
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += got_q[i] != want_q[i];
    EXPECT_EQ(wrong, 0u) << "of " << n;
    EXPECT_EQ(got_q[3], -128);
    EXPECT_EQ(got_scales[1], 1.0f) << "a block of zeros";
    EXPECT_EQ(got_scales[2], 1.0f) << "block 2's largest magnitude is 128";
    const int8_t* b2 = got_q.data() + 2 * kQuantBlock;
    EXPECT_EQ(b2[7], 127) << "+absmax clamps to 127";
    EXPECT_EQ(b2[8], -128);
    EXPECT_EQ(b2[105], 2) << "2.5 rounds to even";   // i % 200 = 105: (105 - 100) / 2
    EXPECT_EQ(b2[107], 4) << "3.5 rounds to even";
    EXPECT_EQ(b2[99], 0) << "-0.5 rounds to even";
    // Dequantized: q times the block's scale, rounded to the dtype; within half a step of x except
    // where +absmax was clamped (one step).
    for (size_t i = 0; i < n; ++i) {
      float got = 0;
      if (dtype == DType::kF32) {
        std::memcpy(&got, got_back.data() + 4 * i, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, got_back.data() + 2 * i, 2);
        got = dtype == DType::kBF16 ? to_float(bf16{bits}) : to_float(fp16{bits});
      }
      const float want = float(want_q[i]) * want_scales[i / kQuantBlock];
      const float tol = dtype == DType::kF32 ? 0.0f : std::fabs(want) * (dtype == DType::kBF16 ? 0x1p-8f : 0x1p-11f);
      ASSERT_LE(std::fabs(got - want), tol) << "element " << i;
      const float step = want_scales[i / kQuantBlock];
      ASSERT_LE(std::fabs(want - in.exact[i]), want_q[i] == 127 ? step * 1.0001f : step * 0.5001f) << "element " << i;
    }
  }
}

// qgZ's int4: two values a byte (element 2k in the low nibble), levels -8..7, blocks of 512 with
// an odd last one; dequantized within half a step (a step where +absmax clamps to 7).
TEST(QuantizeInt4, DeepSpeedsSymmetricRulePacked) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const size_t block = kQuantBlockInt4, n = 3 * block + 77;
  const size_t blocks = (n + block - 1) / block, bytes = (n + 1) / 2;
  std::vector<float> x = randn<float>(n, 23, 1.0f);
  for (size_t i = block; i < 2 * block; ++i) x[i] = 0.0f;  // a block of zeros
  x[2 * block + 5] = 4.0f;                                  // block 2's largest: s = 2, 1.25 -> 2.5 -> 2
  x[2 * block + 6] = 1.25f;
  x[2 * block + 7] = 1.75f;  // 3.5 -> 4
  for (size_t i = 2 * block; i < 3 * block; ++i) {
    if (i < 2 * block + 5 || i > 2 * block + 7) x[i] = std::fmod(x[i], 1.0f);
  }
  DeviceArray<float> dx(*cpu, n), back(*cpu, n);
  DeviceArray<uint8_t> q(*cpu, bytes);
  DeviceArray<float> scales(*cpu, blocks);
  cpu->copy_from_host(dx.data(), x.data(), n * 4);
  cpu->optimizer_ops().quantize(dx.data(), DType::kF32, n, block, 4, q.data(), scales.data());
  cpu->optimizer_ops().dequantize(q.data(), scales.data(), n, block, 4, back.data(), DType::kF32);
  std::vector<uint8_t> got(bytes);
  std::vector<float> got_scales(blocks), got_back(n);
  cpu->copy_to_host(got.data(), q.data(), bytes);
  cpu->copy_to_host(got_scales.data(), scales.data(), blocks * 4);
  cpu->copy_to_host(got_back.data(), back.data(), n * 4);
  std::vector<int8_t> want(n);
  for (size_t b = 0; b < blocks; ++b) {
    float scale = 0;
    reference_quantize_block(x.data() + b * block, std::min(block, n - b * block), want.data() + b * block, &scale, 4);
    EXPECT_EQ(got_scales[b], scale) << "block " << b;
  }
  EXPECT_EQ(got_scales[1], 1.0f) << "a block of zeros";
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const int nibble = (got[i / 2] >> (4 * (i % 2))) & 15;
    wrong += (nibble >= 8 ? nibble - 16 : nibble) != want[i];
    ASSERT_EQ(got_back[i], float(want[i]) * got_scales[i / block]) << "element " << i;
  }
  EXPECT_EQ(wrong, 0u) << "of " << n;
  EXPECT_EQ(want[2 * block + 5], 7) << "+absmax clamps to 7";
  EXPECT_EQ(want[2 * block + 6], 2) << "2.5 rounds to even";
  EXPECT_EQ(want[2 * block + 7], 4) << "3.5 rounds to even";
  EXPECT_EQ(got[bytes - 1] >> 4, 0) << "the odd last element's high nibble stays 0";
}

TEST(QuantizedSplit, PacketsOfScalesThenBytes) {
  const QuantizedSplit split({kQuantBlock + 1, 0, 5, 2 * kQuantBlock});
  // Rank 0: 2 scales + ceil(2049 / 4) = 513 words; rank 1 nothing; rank 2: 1 + 2; rank 3: 2 + 1024.
  EXPECT_EQ(split.words, (std::vector<size_t>{2 + 513, 0, 3, 2 + 1024}));
  EXPECT_EQ(split.offset, (std::vector<size_t>{0, 515, 515, 518}));
  EXPECT_EQ(split.bytes(), 4 * (515 + 3 + 1026));
  // int4: blocks of 512, eight values a word. 1000: 2 scales + 125 words; 9: 1 + 2.
  const QuantizedSplit four({1000, 9, 0}, 4);
  EXPECT_EQ(four.words, (std::vector<size_t>{127, 3, 0}));
  EXPECT_EQ(four.block(), kQuantBlockInt4);
  // Cut at tensor starts (flat offsets 1024 and 3008): rank 0's [0, 3000) in two runs of one
  // block each, 3000 bytes; rank 1's [3000, 3017) in runs of 8 and 9, each on its own bytes.
  const QuantizedSplit cut({3000, 17}, 8, {0, 3000}, {1024, 3008});
  EXPECT_EQ(cut.words, (std::vector<size_t>{2 + 750, 2 + 5}));
  ASSERT_EQ(cut.segments[1].size(), 2u);
  EXPECT_EQ(cut.segments[1][1].offset, 8u);
  EXPECT_EQ(cut.segments[1][1].byte, 8u);
  const QuantizedSplit cut4({17}, 4, {3000}, {3008});  // int4: 8 values in 4 bytes, 9 in 5
  EXPECT_EQ(cut4.segments[0][1].byte, 4u);
  EXPECT_EQ(cut4.words, (std::vector<size_t>{2 + 3}));
}

// Four ranks' slices of one unit, each quantized into its packet as if gathered in place, then
// the whole unit dequantized: every rank's values within half a step of its block.
TEST(QuantizedSplit, PacketsRoundTripRankByRank) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::vector<size_t> counts{3000, 17, 0, 5000};
  size_t n = 0;
  for (size_t c : counts) n += c;
  const std::vector<float> unit = randn<float>(n, 17, 1.0f);
  const QuantizedSplit split(counts);
  DeviceArray<float> x(*cpu, n), out(*cpu, n);
  DeviceArray<unsigned char> wire(*cpu, split.bytes());
  cpu->copy_from_host(x.data(), unit.data(), n * 4);
  size_t at = 0;
  for (int r = 0; r < 4; ++r) {
    quantize_packet(*cpu, split, r, x.data() + at, DType::kF32, wire.data());
    at += counts[size_t(r)];
  }
  dequantize_packets(*cpu, split, wire.data(), out.data(), DType::kF32);
  std::vector<float> got(n);
  cpu->copy_to_host(got.data(), out.data(), n * 4);
  at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    for (size_t j = 0; j < counts[r]; ++j) {
      const size_t lo = j / kQuantBlock * kQuantBlock, hi = std::min(counts[r], lo + kQuantBlock);
      float a = 0;
      for (size_t k = lo; k < hi; ++k) a = std::max(a, std::fabs(unit[at + k]));
      const float step = a / 128.0f;
      ASSERT_LE(std::fabs(got[at + j] - unit[at + j]), step * 1.0001f) << "rank " << r << " element " << j;
    }
    at += counts[r];
  }
  // Each packet starts with its scales: rank 3's first scale is its first block's absmax / 128.
  std::vector<float> words(split.total_words);
  cpu->copy_to_host(words.data(), wire.data(), split.bytes());
  float a = 0;
  for (size_t k = 0; k < kQuantBlock; ++k) a = std::max(a, std::fabs(unit[3017 + k]));
  EXPECT_EQ(words[split.offset[3]], 1.0f / (128.0f / a));
}

}  // namespace
}  // namespace zt
