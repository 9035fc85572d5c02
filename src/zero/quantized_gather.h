// ZeRO++'s quantized packets. qwZ (DeepSpeed's zero_quantized_weights): stage 3's all-gathers carry
// each rank's slice of a unit as int8 with one fp32 scale per block of kQuantBlock elements (the
// slice's last block may be shorter), instead of the training dtype. Each rank's packet is [its
// scales | its values, padded to 4 bytes], and the packets travel as 4-byte words in one
// all-gather (the communicators move words; they never do arithmetic on an all-gather). On arrival
// every rank, the owner too, dequantizes the whole unit, so all ranks compute with the same
// weights. qgZ's int4 packets (zero/quantized_reduce.h) are laid out alike, in blocks of
// kQuantBlockInt4.
//
// Blocks start at each rank's slice and again at every tensor that starts inside it, so no block
// mixes two ranks' values or two tensors' (a layernorm's weights near 1 beside a matrix's near
// 0.02 would leave the matrix a few levels: measured, 7 % higher loss after 50 steps of the demo
// GPT-2 with blocks across tensors). DeepSpeed's coalesced path quantizes a bucket's concatenated
// shards in groups of about 4000-8000 chosen to divide the bucket (partition_parameters.py:
// CUDAQuantizer), across tensors; its per-parameter path does not mix them.
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

/// Each tensor's first flat offset, in order: where quantization blocks restart.
std::vector<size_t> tensor_starts(const std::vector<std::pair<size_t, size_t>>& tensor_ranges);

/// Where each rank's packet lies in a quantized collective of slices of `counts` elements.
struct QuantizedSplit {
  /// A run of a slice inside one tensor: its offset in the slice, its length, and where its
  /// values start among the packet's value bytes (each segment's on a byte of its own).
  struct Segment {
    size_t offset, count, byte;
  };
  int bits = 8;                ///< 8 (qwZ) or 4 (qgZ)
  std::vector<size_t> counts;  ///< elements of each rank's slice
  std::vector<size_t> words;   ///< 4-byte words of each rank's packet (the all-gather's counts)
  std::vector<size_t> offset;  ///< first word of each rank's packet
  std::vector<std::vector<Segment>> segments;  ///< each rank's slice cut at tensor starts
  size_t total_words = 0;

  /// Slices of `slice_counts` elements, rank r's starting at flat offset first[r], cut at the
  /// flat offsets `cuts` (tensor_starts; sorted).
  QuantizedSplit(const std::vector<size_t>& slice_counts, int bits, const std::vector<size_t>& first,
                 const std::vector<size_t>& cuts);
  /// Slices not cut (one segment each).
  explicit QuantizedSplit(const std::vector<size_t>& slice_counts, int bits = 8);
  size_t bytes() const { return total_words * 4; }
  size_t block() const { return block_of(bits); }
  static size_t block_of(int bits) { return bits == 8 ? kQuantBlock : kQuantBlockInt4; }
  static size_t blocks(size_t n, int bits = 8) { return (n + block_of(bits) - 1) / block_of(bits); }
  /// Scales of a slice cut into `segments`: each segment's blocks.
  size_t scales(const std::vector<Segment>& s) const;
};

/// Quantizes `rank`'s slice (`mine`, its counts[rank] elements of `dtype`) into its packet in
/// `wire` (split.bytes()), with the backend's kernels on its compute stream.
void quantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const void* mine, DType dtype,
                     unsigned char* wire);

/// Dequantizes `rank`'s packet in `wire` into `out` (its counts[rank] elements of `dtype`), on
/// the compute stream.
void dequantize_packet(Backend& backend, const QuantizedSplit& split, int rank, const unsigned char* wire, void* out,
                       DType dtype);

/// Dequantizes every rank's packet in `wire` into `out` (sum of counts elements of `dtype`, in
/// rank order), on the compute stream.
void dequantize_packets(Backend& backend, const QuantizedSplit& split, const unsigned char* wire, void* out,
                        DType dtype);

}  // namespace zt
