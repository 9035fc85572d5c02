// How the flat model buffer is split across ranks: the one place that states the arithmetic.
//
// The flat buffer (ParamLayout::flat_size elements, each tensor 16-element aligned) is padded up
// to a multiple of world_size x kPartitionAlignment, then cut into world_size equal, contiguous
// partitions; rank r owns [r P, (r + 1) P). The padding keeps every partition the same size (so a
// plain reduce-scatter/all-gather of the whole buffer is legal) and every partition start
// 64-byte aligned in fp32 (SIMD loads) and 32-byte in 16-bit (NCCL's preferred alignment). The
// padding elements are zero and stay zero: their gradients are zero, so Adam leaves them alone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace zt {

inline constexpr size_t kPartitionAlignment = 16;

struct PartitionMap {
  size_t flat_size = 0;    ///< unpadded elements (the model's flat buffer)
  size_t padded_size = 0;  ///< world_size x partition_size
  size_t partition_size = 0;
  int world_size = 1;

  PartitionMap() = default;
  PartitionMap(size_t flat, int world) : flat_size(flat), world_size(world) {
    const size_t quantum = size_t(world) * kPartitionAlignment;
    padded_size = (flat + quantum - 1) / quantum * quantum;
    partition_size = padded_size / size_t(world);
  }
  size_t begin(int rank) const { return size_t(rank) * partition_size; }
  size_t end(int rank) const { return begin(rank) + partition_size; }
  /// The part of rank's partition that lies in the model, [first, second): what its checkpoint
  /// shard holds. Both ends are clipped to flat_size, so a rank whose partition lies wholly in
  /// the padding (a small model on many ranks) holds the empty [flat_size, flat_size), never a
  /// range whose begin is past its end.
  std::pair<size_t, size_t> held(int rank) const {
    return {std::min(begin(rank), flat_size), std::min(end(rank), flat_size)};
  }

  /// Where each rank's part of [lo, hi) starts (its count, split's, may be 0).
  std::vector<size_t> starts(size_t lo, size_t hi) const {
    std::vector<size_t> out(static_cast<size_t>(world_size));
    for (int r = 0; r < world_size; ++r) out[size_t(r)] = std::min(hi, std::max(lo, begin(r)));
    return out;
  }
  /// How many elements of [lo, hi) each rank owns, in rank order (the counts of a
  /// reduce-scatter or all-gather of that range).
  std::vector<size_t> split(size_t lo, size_t hi) const {
    std::vector<size_t> counts(size_t(world_size), 0);
    for (int r = 0; r < world_size; ++r) {
      size_t a = std::max(lo, begin(r)), b = std::min(hi, end(r));
      counts[size_t(r)] = b > a ? b - a : 0;
    }
    return counts;
  }
};

}  // namespace zt
