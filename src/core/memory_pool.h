// Byte accounting for the four places model state can live. Every allocation the engine makes
// goes through a pool, so `pool_peak_bytes` in metrics.jsonl is a measurement, not an estimate.
//
//   device  the accelerator's memory; on the CPU backend, the memory that stands in for it
//   host    ordinary host memory (offloaded optimizer state, staging)
//   pinned  page-locked host memory (DMA-able staging; plain host memory on the CPU backend)
//   nvme    bytes held in files on NVMe (ZeRO-Infinity), accounted but not mapped
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

enum class Pool { kDevice = 0, kHost = 1, kPinned = 2, kNvme = 3 };
inline constexpr int kNumPools = 4;
const char* pool_name(Pool p);

/// Live and peak bytes of one pool, safe to update from several threads.
class PoolCounter {
 public:
  void add(size_t bytes);
  void sub(size_t bytes);
  size_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  /// Starts a new peak window at the current live bytes (e.g. per training step).
  void reset_peak() { peak_.store(in_use(), std::memory_order_relaxed); }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

/// The process-wide counter of a pool.
PoolCounter& pool_counter(Pool p);

/// A snapshot of all four pools.
struct PoolBytes {
  std::array<size_t, kNumPools> bytes{};
  size_t operator[](Pool p) const { return bytes[int(p)]; }
};
PoolBytes pool_peaks();
PoolBytes pool_in_use();
void reset_pool_peaks();

/// The host memory the kernel says a new allocation could take without swapping
/// (/proc/meminfo's MemAvailable), in bytes; 0 where it cannot be read.
size_t host_memory_available();

/// Allocates `bytes` of host memory charged to `pool` (device/host/pinned on the CPU backend),
/// 64-byte-aligned, page-aligned from 4 KiB up (O_DIRECT swaps need it). Pages are touched in
/// parallel so that first-touch page faults happen here, once, and not inside the first timed
/// kernel. Throws zt::Error on failure. DeviceArray (backend/device_array.h) owns what backends
/// allocate through this.
void* pool_alloc(Pool pool, size_t bytes);
void pool_free(Pool pool, void* ptr, size_t bytes);

}  // namespace zt
