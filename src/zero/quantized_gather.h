// ZeRO++'s quantized packets. qwZ (DeepSpeed's zero_quantized_weights): stage 3's all-gathers carry
// each rank's slice of a unit as int8 with one fp32 scale per block of kQuantBlock elements (the
// slice's last block may be shorter), instead of the training dtype. Each rank's packet is [its
// scales | its values, padded to 4 bytes], and the packets travel as 4-byte words in one
// all-gather (the communicators move words; they never do arithmetic on an all-gather). On arrival
// every rank, the owner too, dequantizes the whole unit, so all ranks compute with the same
// weights. qgZ's int4 packets (zero/quantized_reduce.h) are laid out alike, in blocks of
// kQuantBlockInt4.
//
// DeepSpeed quantizes a bucket's concatenated shards in groups of about 4000-8000 chosen to divide
// the bucket (partition_parameters.py: CUDAQuantizer); here blocks start at each rank's slice,
// so no group spans two ranks' values and any slice length works.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace zt {

inline constexpr size_t kQuantBlock = 2048;
/// qgZ's: DeepSpeed's int4 groups of a gradient tensor are about min(rows, cols) elements (768 on
/// GPT-2's matrices); smaller blocks here, so never coarser.
inline constexpr size_t kQuantBlockInt4 = 512;

/// Where each rank's packet lies in a quantized collective of slices of `counts` elements.
struct QuantizedSplit {
  int bits = 8;                ///< 8 (qwZ) or 4 (qgZ)
  std::vector<size_t> counts;  ///< elements of each rank's slice
  std::vector<size_t> words;   ///< 4-byte words of each rank's packet (the all-gather's counts)
  std::vector<size_t> offset;  ///< first word of each rank's packet
  size_t total_words = 0;

  explicit QuantizedSplit(const std::vector<size_t>& slice_counts, int bits = 8);
  size_t bytes() const { return total_words * 4; }
  size_t block() const { return block_of(bits); }
  static size_t block_of(int bits) { return bits == 8 ? kQuantBlock : kQuantBlockInt4; }
  static size_t blocks(size_t n, int bits = 8) { return (n + block_of(bits) - 1) / block_of(bits); }
  /// Words of one rank's packet: its scales, then its values rounded up to words.
  static size_t packet_words(size_t n, int bits = 8) { return blocks(n, bits) + (n * size_t(bits) + 31) / 32; }
};

/// Quantizes `rank`'s slice (`mine`, its counts[rank] elements of `dtype`) into its packet in
/// `wire` (split.bytes()), with the backend's kernels on its compute stream.
void quantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const void* mine, DType dtype,
                     unsigned char* wire);

/// Dequantizes every rank's packet in `wire` into `out` (sum of counts elements of `dtype`, in
/// rank order), on the compute stream.
void dequantize_packets(Backend& backend, const QuantizedSplit& split, const unsigned char* wire, void* out,
                        DType dtype);

}  // namespace zt
