#include "core/memory_pool.h"

#include <sys/mman.h>

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

namespace zt {

size_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  unsigned long long kib = 0;
  while (std::getline(meminfo, line)) {
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return size_t(kib) * 1024;
  }
  return 0;
}

const char* pool_name(Pool p) {
  switch (p) {
    case Pool::kDevice: return "device";
    case Pool::kHost: return "host";
    case Pool::kPinned: return "pinned";
    case Pool::kNvme: return "nvme";
  }
  return "?";
}

void PoolCounter::add(size_t bytes) {
  size_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t seen = peak_.load(std::memory_order_relaxed);
  while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void PoolCounter::sub(size_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

static std::array<PoolCounter, kNumPools>& counters() {
  static std::array<PoolCounter, kNumPools> all;
  return all;
}

PoolCounter& pool_counter(Pool p) { return counters()[int(p)]; }

PoolBytes pool_peaks() {
  PoolBytes out;
  for (int i = 0; i < kNumPools; ++i) out.bytes[i] = counters()[i].peak();
  return out;
}

PoolBytes pool_in_use() {
  PoolBytes out;
  for (int i = 0; i < kNumPools; ++i) out.bytes[i] = counters()[i].in_use();
  return out;
}

void reset_pool_peaks() {
  for (auto& c : counters()) c.reset_peak();
}

void* pool_alloc(Pool pool, size_t bytes) {
  ZT_CHECK(pool != Pool::kNvme, "the nvme pool holds files, not memory");
  // Page alignment from a page up: O_DIRECT swaps (NVMe offload) need it, and DMA likes it.
  // From 2 MiB up, transparent huge pages: the optimizer and the flat buffers are streamed
  // through whole, and 4 KiB pages cost a TLB miss every 4 KiB of that stream.
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t alignment = bytes >= kHugePage ? kHugePage : bytes >= 4096 ? 4096 : 64;
  size_t rounded = (bytes + alignment - 1) & ~(alignment - 1);
  void* ptr = std::aligned_alloc(alignment, rounded);
  if (ptr && alignment == kHugePage) ::madvise(ptr, rounded, MADV_HUGEPAGE);  // advice: failure is harmless
  if (!ptr) {
    throw OutOfMemory(cat("out of memory: could not allocate ", bytes, " bytes in the ", pool_name(pool),
                    " pool (", pool_counter(pool).in_use(), " bytes already in use)"));
  }
  // Touch the pages from the threads that will use them: writing into fresh pages runs at
  // ~1.5 GB/s here against ~10 GB/s into touched memory (docs/design.md), so pay that once.
  auto* p = static_cast<unsigned char*>(ptr);
  if (rounded >= (size_t(1) << 22) && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (size_t off = 0; off < rounded; off += 4096) p[off] = 0;
  }
  pool_counter(pool).add(bytes);
  return ptr;
}

void pool_free(Pool pool, void* ptr, size_t bytes) {
  if (!ptr) return;
  std::free(ptr);
  pool_counter(pool).sub(bytes);
}

}  // namespace zt
