// Stage 2 and 3 gradient reduction during backward.
//
// Units finish their backward from the top of the flat buffer down (ln_f, the last block, ...,
// the embeddings), so their gradients form one contiguous range that grows downward. They are
// copied into a bucket of reduce_bucket_size elements (in communication_data_type); a full bucket
// is reduce-scattered at once (each rank receives the sum of the part it owns, per PartitionMap)
// while backward continues (overlap_comm, two buckets in flight), and each rank adds what it
// received into its gradient partition, so the partition accumulates across micro-steps.
// Streams: buckets are filled and the received sums added on the compute stream; the reduction
// runs on the communicator's stream after the fill, and the compute stream waits for it before it
// adds the sums or fills that bucket again. Sums,
// not means: the optimizer divides by the world size (DeepSpeed's post-scaling).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "zero/partition.h"

namespace zt {

class GradBucketer {
 public:
  /// `bucket_elements` per bucket; `use_reduce_scatter` false reduces with all-reduce (DeepSpeed's
  /// reduce_scatter: false) and keeps the owned part.
  /// What this rank receives is added into `partition` (its gradient partition, in
  /// `partition_dtype`).
  GradBucketer(Backend& backend, DataComm& comm, const PartitionMap& partition, DType comm_dtype,
               size_t bucket_elements, bool overlap, bool use_reduce_scatter, void* grad_partition,
               DType partition_dtype);

  /// Adds fp32 gradients of the flat range [lo, lo + count). Ranges arrive from high offsets to
  /// low; a gap (or a range above the current bucket) flushes the bucket first.
  void add(size_t lo, const float* grads, size_t count);
  /// Launches the partial bucket and waits for every reduction of this micro-step.
  void finish();

  size_t buffer_bytes() const;
  /// Called with each flat range [lo, hi) of this rank's partition right after a reduction was
  /// added into it (ZeRO-Offload copies it to the host from here, overlapped with backward).
  void on_reduced(std::function<void(size_t lo, size_t hi)> callback) { on_reduced_ = std::move(callback); }

 private:
  struct Bucket {
    DeviceArray<unsigned char> send, recv;
    size_t lo = 0, hi = 0;  // the flat range held, right-aligned in `send`
    std::shared_ptr<DataWork> work;
  };
  void flush();
  void complete(Bucket& b);

  Backend& backend_;
  Stream& compute_;
  DataComm& comm_;
  OptimizerOps& ops_;
  PartitionMap partition_;
  DType comm_dtype_;
  size_t capacity_;
  bool overlap_, use_reduce_scatter_;
  void* grad_partition_;
  DType partition_dtype_;
  std::function<void(size_t, size_t)> on_reduced_;
  Bucket buckets_[2];  // one fills while the other is reduced
  int current_ = 0;
  // Test hook (ZT_TEST_SKIP_WAIT=grad_bucket): leaves out the wait that orders the compute
  // stream after a bucket's reduction, so that a test can see the emulated backend catch it.
  bool skip_wait_ = false;
};

}  // namespace zt
