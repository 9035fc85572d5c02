// The CUDA caching allocator's size rules and the fixed costs of a GPU process, in plain C++ so
// that zero_estimate (which runs anywhere) predicts what the allocator will reserve. Modelled on
// PyTorch's CUDACachingAllocator: requests round up to 512 bytes; small ones (up to 1 MiB) are
// carved out of 2 MiB segments, large ones get segments rounded up to 2 MiB, which a later
// request of no more than the segment may reuse (splitting off what it leaves, when that is at
// least 1 MiB).
#pragma once

#include <cstddef>

namespace zt::cuda {

inline constexpr size_t kBlockAlign = 512;
inline constexpr size_t kSmallRequest = size_t(1) << 20;  // up to this, from a small segment
inline constexpr size_t kSmallSegment = size_t(2) << 20;
inline constexpr size_t kLargeRound = size_t(2) << 20;    // large segments are multiples of this

/// A request's block size.
constexpr size_t block_bytes(size_t request) { return (request + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }
constexpr bool is_small(size_t request) { return block_bytes(request) <= kSmallRequest; }
/// The segment a new large request makes the allocator reserve with cudaMalloc.
constexpr size_t large_segment_bytes(size_t request) {
  return (block_bytes(request) + kLargeRound - 1) / kLargeRound * kLargeRound;
}

/// GPU memory a process uses outside the allocator: the CUDA context with its kernels loaded
/// lazily (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12), cuBLASLt's workspace, and NCCL's
/// buffers for one communicator (NCCL_BUFFSIZE 4 MiB per channel and direction, up to 32 channels
/// between the peers of an NVLink node). Measured values will replace these once a GPU run
/// records them (jobs/gpu_smoke.sh prints the allocator's and the device's own figures).
inline constexpr size_t kContextBytes = size_t(500) << 20;
inline constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;
inline constexpr size_t kNcclBuffersBytes = size_t(2) * 32 * (size_t(4) << 20);

}  // namespace zt::cuda
