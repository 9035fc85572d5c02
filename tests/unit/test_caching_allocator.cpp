// The CUDA caching allocator's bookkeeping, driven on the host: a heap that hands out host memory
// and counts reservations, and fences the test completes by hand. Expected sizes come from the
// rules (512-byte blocks, 2 MiB small segments, large segments rounded to 2 MiB), worked by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "backend/cuda/caching_allocator.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

class HostHeap final : public DeviceHeap {
 public:
  size_t limit = SIZE_MAX;  // reserve() fails beyond this many live bytes, as a full GPU does
  size_t live = 0, reserves = 0, releases = 0;
  std::map<void*, size_t> segments;

  void* reserve(size_t bytes) override {
    if (live + bytes > limit) return nullptr;
    void* p = std::aligned_alloc(4096, bytes);
    segments[p] = bytes;
    live += bytes;
    ++reserves;
    return p;
  }
  void release(void* p) override {
    live -= segments.at(p);
    segments.erase(p);
    ++releases;
    std::free(p);
  }
};

class ManualFence final : public Fence {
 public:
  bool complete = false;
  int waits = 0;
  bool done() override { return complete; }
  void wait() override {
    ++waits;
    complete = true;
  }
};

std::vector<std::shared_ptr<Fence>> fences(std::initializer_list<std::shared_ptr<ManualFence>> fs) {
  return {fs.begin(), fs.end()};
}

TEST(CachingAllocator, RoundsRequestsAndReservesSegmentsByTheRules) {
  HostHeap heap;
  CachingAllocator a(heap);
  // Block 3 MiB + 512 in a 4 MiB segment; the tail, under 1 MiB, is not worth a block of its
  // own (only small requests would fit it, and they have their own segments): handed out whole.
  void* big = a.allocate(3 * MiB + 1);
  void* s1 = a.allocate(700 * KiB);         // small: one 2 MiB segment ...
  void* s2 = a.allocate(700 * KiB + 1);     // ... holds this one too (700 KiB + 512)
  ASSERT_NE(big, nullptr);
  AllocatorStats st = a.stats();
  EXPECT_EQ(st.segments, 2u);
  EXPECT_EQ(st.reserved, 4 * MiB + 2 * MiB);
  EXPECT_EQ(st.allocated, 4 * MiB + 700 * KiB + (700 * KiB + 512));
  EXPECT_EQ(static_cast<char*>(s2) - static_cast<char*>(s1), ptrdiff_t(700 * KiB));
  EXPECT_EQ(a.allocate(0), nullptr);
  a.free(big, {});
  a.free(s1, {});
  a.free(s2, {});
  EXPECT_EQ(a.stats().allocated, 0u);
}

TEST(CachingAllocator, ReusesAFreedBlockOnlyAfterItsFencesComplete) {
  HostHeap heap;
  CachingAllocator a(heap);
  void* p = a.allocate(8 * MiB);
  auto compute = std::make_shared<ManualFence>(), comm = std::make_shared<ManualFence>();
  a.free(p, fences({compute, comm}));
  compute->complete = true;  // one stream is past the last use, the other is not
  void* q = a.allocate(8 * MiB);
  EXPECT_NE(q, p) << "a block was reused while a stream could still be using it";
  EXPECT_EQ(heap.reserves, 2u);
  comm->complete = true;
  void* r = a.allocate(8 * MiB);
  EXPECT_EQ(r, p);
  EXPECT_EQ(heap.reserves, 2u);
  EXPECT_EQ(a.stats().reuses, 1u);
  a.free(q, {});
  a.free(r, {});
}

TEST(CachingAllocator, SplitsALargeBlockAndMergesItBack) {
  HostHeap heap;
  CachingAllocator a(heap);
  void* whole = a.allocate(10 * MiB);
  a.free(whole, {});
  void* head = a.allocate(4 * MiB);  // best fit is the 10 MiB block: split, 6 MiB stays free
  void* tail = a.allocate(6 * MiB);
  EXPECT_EQ(head, whole);
  EXPECT_EQ(static_cast<char*>(tail), static_cast<char*>(whole) + 4 * MiB);
  EXPECT_EQ(heap.reserves, 1u);
  a.free(head, {});
  a.free(tail, {});
  void* again = a.allocate(10 * MiB);  // merged back into one block
  EXPECT_EQ(again, whole);
  EXPECT_EQ(heap.reserves, 1u);
  a.free(again, {});
}

TEST(CachingAllocator, KeepsSmallAndLargeRequestsInTheirOwnSegments) {
  HostHeap heap;
  CachingAllocator a(heap);
  void* large = a.allocate(4 * MiB);
  a.free(large, {});
  void* small = a.allocate(64 * KiB);  // a free 4 MiB large block exists, but small requests never split it
  EXPECT_EQ(heap.reserves, 2u);
  EXPECT_EQ(a.stats().reserved, 4 * MiB + 2 * MiB);
  a.free(small, {});
}

TEST(CachingAllocator, WhenFullWaitsForPendingFreesThenReleasesTheCache) {
  HostHeap heap;
  heap.limit = 16 * MiB;
  CachingAllocator a(heap);
  void* p = a.allocate(10 * MiB);
  auto fence = std::make_shared<ManualFence>();
  a.free(p, fences({fence}));
  // 10 MiB still pending on a stream: the allocator waits for it rather than failing.
  void* q = a.allocate(10 * MiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(fence->waits, 1);
  a.free(q, {});
  // 10 MiB cached and free, 14 MiB wanted, 16 MiB of device: the cache goes back first.
  void* r = a.allocate(14 * MiB);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(heap.releases, 1u);
  EXPECT_EQ(a.stats().reserved, 14 * MiB);
  // Beyond the device: a one-line OutOfMemory, and the allocator still works afterwards.
  EXPECT_THROW(a.allocate(4 * MiB), OutOfMemory);
  a.free(r, {});
  void* s = a.allocate(4 * MiB);
  EXPECT_NE(s, nullptr);
  a.free(s, {});
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyWholeFreeSegments) {
  HostHeap heap;
  CachingAllocator a(heap);
  void* keep = a.allocate(4 * MiB);
  void* drop = a.allocate(6 * MiB);
  a.free(drop, {});
  a.empty_cache();
  EXPECT_EQ(heap.releases, 1u);
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
  EXPECT_EQ(a.stats().segments, 1u);
  a.free(keep, {});
}

TEST(CachingAllocator, RefusesAPointerItDidNotHandOut) {
  HostHeap heap;
  CachingAllocator a(heap);
  int x = 0;
  EXPECT_THROW(a.free(&x, {}), Error);
  void* p = a.allocate(1024);
  a.free(p, {});
  EXPECT_THROW(a.free(p, {}), Error) << "a double free went unnoticed";
}

}  // namespace
}  // namespace zt::cuda
