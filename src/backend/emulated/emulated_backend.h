// The emulated device backend (--accelerator emulated): the CPU's kernels behind the contract a
// GPU keeps, enforced. Device memory is protected from the host (device_memory.h), each stream
// runs its work on its own thread, asynchronously to the host and to the other streams, events
// are real, and every operation's reads and writes are checked for a missing event wait
// (access_checker.h). A program that is correct here orders its work as a CUDA program must.
// fp32 results equal the CPU backend's bit for bit: the same kernels run in the same order.
//
// ZT_EMULATED_DELAY_US=n delays each operation by up to n microseconds at random, so that a
// missing host synchronisation reads stale data rather than data that happened to be ready.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace zt {

std::unique_ptr<Backend> make_emulated_backend();

namespace emulated {

/// A byte range an operation reads or writes. kToEnd: from ptr to the end of its allocation
/// (for an argument whose extent the operation does not know, such as an embedding table).
struct Access {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool write = false;
};
inline constexpr size_t kToEnd = SIZE_MAX;

/// Enqueues an operation on the compute stream: `fn` runs on the stream's thread with the
/// device memory of `accesses` opened.
class ComputeQueue {
 public:
  virtual ~ComputeQueue() = default;
  virtual void enqueue_compute(const char* op, std::vector<Access> accesses, std::function<void()> fn) = 0;
};

/// The CPU kernels `inner`, enqueued on the compute stream with their accesses declared.
template <typename T>
std::unique_ptr<KernelOps<T>> make_queued_kernels(ComputeQueue& queue, KernelOps<T>& inner);
std::unique_ptr<OptimizerOps> make_queued_optimizer_ops(ComputeQueue& queue, OptimizerOps& inner);

}  // namespace emulated
}  // namespace zt
