// A stream-aware caching allocator for device memory, after PyTorch's CUDACachingAllocator:
// cudaMalloc and cudaFree synchronise the whole device, so freed blocks are kept and handed out
// again. The sizes follow caching_allocator_rules.h (which zero_estimate reads too).
//
// Stream safety: a freed block may still be read or written by work enqueued before the free, on
// any stream. So free() takes fences (events recorded on every live stream at the time of the
// free) and the block is handed out again only once all of them have completed. The allocator
// itself knows nothing of CUDA: a DeviceHeap reserves and releases segments and a Fence answers
// whether its point in a stream has run, so the unit tests drive it on the host.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace zt::cuda {

/// Where segments come from (cudaMalloc / cudaFree).
class DeviceHeap {
 public:
  virtual ~DeviceHeap() = default;
  /// A new segment of `bytes`, or null when the device is out of memory.
  virtual void* reserve(size_t bytes) = 0;
  virtual void release(void* segment) = 0;
};

/// A point in a stream's work (a recorded cudaEvent).
class Fence {
 public:
  virtual ~Fence() = default;
  virtual bool done() = 0;     // cudaEventQuery
  virtual void wait() = 0;     // cudaEventSynchronize
};

struct AllocatorStats {
  size_t allocated = 0;       // bytes in blocks handed out (rounded to kBlockAlign)
  size_t reserved = 0;        // bytes in segments
  size_t peak_reserved = 0;
  size_t segments = 0;
  size_t reuses = 0;          // requests served from the cache
};

class CachingAllocator {
 public:
  explicit CachingAllocator(DeviceHeap& heap) : heap_(heap) {}
  /// Releases every segment: everything must have been freed and its fences completed.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (0 gives null). When the device is full it waits for pending
  /// frees, then releases the cached segments, before it throws zt::OutOfMemory.
  void* allocate(size_t bytes);
  /// Returns the block at `ptr`; it is reused once every fence has completed.
  void free(void* ptr, std::vector<std::shared_ptr<Fence>> fences);
  /// Releases the segments no block is handed out from (waiting for pending frees first).
  void empty_cache();
  AllocatorStats stats() const;

 private:
  struct Block {
    char* segment = nullptr;  // the segment's base: blocks merge only within one segment
    size_t size = 0;
    bool small = false;
    bool free = false;
  };
  struct Pending {
    char* ptr;
    std::vector<std::shared_ptr<Fence>> fences;
  };
  using FreeSet = std::set<std::pair<size_t, char*>>;  // (size, address): best fit first

  FreeSet& free_set(bool small) { return small ? free_small_ : free_large_; }
  char* take_cached(size_t size, bool small);
  char* new_segment(size_t size, bool small);
  void split(char* ptr, size_t size);
  void make_free(char* ptr);
  /// Moves pending frees whose fences have all completed into the free sets; with `wait`, all.
  void collect_pending(bool wait);
  void release_free_segments();

  DeviceHeap& heap_;
  mutable std::mutex mutex_;
  std::map<char*, Block> blocks_;  // every block, in address order
  FreeSet free_small_, free_large_;
  std::vector<Pending> pending_;
  AllocatorStats stats_;
};

}  // namespace zt::cuda
