// The emulated device's memory: every allocation the backend makes, with its pool, and for
// device allocations the page protection that makes them untouchable by the host.
//
// A device allocation is its own mapping, PROT_NONE except while a backend operation that
// declared it runs (open/close count the operations in flight, so two streams may use one
// buffer at once). A host thread that reads or writes it at any other time faults, and the
// SIGSEGV handler installed here names the buffer before the process dies: a GPU would have
// read garbage or crashed somewhere else. Fresh device memory is filled with 0xff bytes (NaN in
// every dtype), so that reading memory nobody wrote shows as NaN, as uninitialised device
// memory does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/memory_pool.h"

namespace zt::emulated {

struct Allocation {
  uintptr_t begin = 0;
  size_t bytes = 0;   // as requested
  size_t mapped = 0;  // device: the page-rounded mapping
  Pool pool = Pool::kHost;
  int open = 0;       // device: operations in flight that use it
  uint64_t id = 0;    // allocation order, for messages
};

class DeviceMemory {
 public:
  DeviceMemory();
  ~DeviceMemory();

  void* allocate(Pool pool, size_t bytes);
  void deallocate(Pool pool, void* ptr, size_t bytes);

  /// The allocation holding `ptr`, or null for memory the backend did not allocate. The pointer
  /// stays valid until the allocation is freed.
  const Allocation* find(const void* ptr) const;
  /// Makes a device allocation accessible for one operation / takes that back.
  void open(const Allocation& a);
  void close(const Allocation& a);

  /// For the SIGSEGV handler: the device allocation holding `addr`, copied out (false if none).
  bool describe_fault(uintptr_t addr, Allocation& out);

 private:
  Allocation* find_locked(uintptr_t p) const;

  mutable std::mutex mutex_;
  std::map<uintptr_t, Allocation> allocations_;  // by begin
  uint64_t next_id_ = 1;
};

/// True on a thread while it runs a backend operation (for the fault message).
bool in_backend_operation();
void set_in_backend_operation(bool value);

}  // namespace zt::emulated
