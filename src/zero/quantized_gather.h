// qwZ (DeepSpeed's zero_quantized_weights): stage 3's all-gathers carry each rank's slice of a
// unit as int8 with one fp32 scale per block of kQuantBlock elements (the slice's last block may
// be shorter), instead of the training dtype. Each rank's packet is [its scales | its int8
// values, padded to 4 bytes], and the packets travel as 4-byte words in one all-gather (the
// communicators move words; they never do arithmetic on an all-gather). On arrival every rank,
// the owner too, dequantizes the whole unit, so all ranks compute with the same weights.
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

/// Where each rank's packet lies in a quantized all-gather of slices of `counts` elements.
struct QuantizedSplit {
  std::vector<size_t> counts;  ///< elements of each rank's slice
  std::vector<size_t> words;   ///< 4-byte words of each rank's packet (the all-gather's counts)
  std::vector<size_t> offset;  ///< first word of each rank's packet
  size_t total_words = 0;

  explicit QuantizedSplit(const std::vector<size_t>& slice_counts);
  size_t bytes() const { return total_words * 4; }
  static size_t blocks(size_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }
  /// Words of one rank's packet: its scales, then its bytes rounded up to words.
  static size_t packet_words(size_t n) { return blocks(n) + (n + 3) / 4; }
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
