#include "backend/cuda/caching_allocator.h"

#include <algorithm>
#include <iterator>

#include "backend/cuda/caching_allocator_rules.h"
#include "core/error.h"
#include "core/human_units.h"

namespace zt::cuda {

CachingAllocator::~CachingAllocator() {
  collect_pending(/*wait=*/true);
  for (auto& [ptr, block] : blocks_) {
    if (ptr == block.segment) heap_.release(ptr);
  }
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = block_bytes(bytes);
  const bool small = is_small(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  collect_pending(false);
  // The fallbacks, in order: a new segment (the host never waits while the device has room),
  // then waiting for the blocks whose streams may still use them, then giving the cached
  // segments back so that one new segment fits.
  char* ptr = take_cached(size, small);
  if (!ptr) ptr = new_segment(size, small);
  if (!ptr) {
    collect_pending(true);
    ptr = take_cached(size, small);
  }
  if (!ptr) {
    release_free_segments();
    ptr = new_segment(size, small);
  }
  if (!ptr) {
    throw OutOfMemory(cat("the GPU is out of memory: ", human_bytes(bytes), " requested with ",
                          human_bytes(stats_.allocated), " allocated and ", human_bytes(stats_.reserved),
                          " reserved by zerotrain (zero_estimate --accelerator cuda shows what a run needs)"));
  }
  split(ptr, size);
  Block& b = blocks_.at(ptr);
  b.free = false;
  stats_.allocated += b.size;
  return ptr;
}

void CachingAllocator::free(void* p, std::vector<std::shared_ptr<Fence>> fences) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mutex_);
  char* ptr = static_cast<char*>(p);
  auto it = blocks_.find(ptr);
  ZT_CHECK(it != blocks_.end() && !it->second.free &&
               std::none_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.ptr == ptr; }),
           "freeing a pointer the caching allocator did not hand out, or freeing it twice");
  stats_.allocated -= it->second.size;
  pending_.push_back(Pending{ptr, std::move(fences)});
  collect_pending(false);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_pending(true);
  release_free_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

char* CachingAllocator::take_cached(size_t size, bool small) {
  FreeSet& set = free_set(small);
  auto it = set.lower_bound({size, nullptr});
  if (it == set.end()) return nullptr;
  char* ptr = it->second;
  set.erase(it);
  ++stats_.reuses;
  return ptr;
}

char* CachingAllocator::new_segment(size_t size, bool small) {
  const size_t bytes = small ? kSmallSegment : large_segment_bytes(size);
  char* seg = static_cast<char*>(heap_.reserve(bytes));
  if (!seg) return nullptr;
  blocks_[seg] = Block{seg, bytes, small, false};
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segments;
  return seg;
}

// Cuts the unused tail of the block at `ptr` (now out of the free sets) into a free block of its
// own when it is worth keeping: any whole block in a small segment, at least a small request's
// limit in a large one (a smaller tail would only ever fit requests that belong to small segments).
// caching_allocator_rules.h states the same rule for zero_estimate.
void CachingAllocator::split(char* ptr, size_t size) {
  Block& b = blocks_.at(ptr);
  const size_t rest = b.size - size;
  if (b.small ? rest < kBlockAlign : rest < kSmallRequest) return;
  b.size = size;
  char* tail = ptr + size;
  blocks_[tail] = Block{b.segment, rest, b.small, true};
  free_set(b.small).insert({rest, tail});
}

// Marks a block free and merges it with free neighbours of the same segment.
void CachingAllocator::make_free(char* ptr) {
  auto it = blocks_.find(ptr);
  it->second.free = true;
  FreeSet& set = free_set(it->second.small);
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    set.erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      set.erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  set.insert({it->second.size, it->first});
}

void CachingAllocator::collect_pending(bool wait) {
  auto ready = [wait](Pending& p) {
    for (auto& f : p.fences) {
      if (wait) {
        f->wait();
      } else if (!f->done()) {
        return false;
      }
    }
    return true;
  };
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    if (ready(p)) {
      make_free(p.ptr);
    } else {
      still.push_back(std::move(p));
    }
  }
  pending_ = std::move(still);
}

void CachingAllocator::release_free_segments() {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    const Block& b = it->second;
    const bool whole = b.free && it->first == b.segment &&
                       (std::next(it) == blocks_.end() || std::next(it)->second.segment != b.segment);
    if (!whole) {
      ++it;
      continue;
    }
    free_set(b.small).erase({b.size, it->first});
    stats_.reserved -= b.size;
    --stats_.segments;
    heap_.release(it->first);
    it = blocks_.erase(it);
  }
}

}  // namespace zt::cuda
