#include "zero/grad_bucketer.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace zt {

GradBucketer::GradBucketer(Backend& backend, DataComm& comm, const PartitionMap& partition, DType comm_dtype,
                           size_t bucket_elements, bool overlap, bool use_reduce_scatter, void* grad_partition,
                           DType partition_dtype)
    : backend_(backend), compute_(backend.compute_stream()), comm_(comm), ops_(backend.optimizer_ops()), partition_(partition), comm_dtype_(comm_dtype),
      capacity_(std::min({bucket_elements, partition.padded_size, comm.max_collective_elements()})), overlap_(overlap),
      use_reduce_scatter_(use_reduce_scatter), grad_partition_(grad_partition), partition_dtype_(partition_dtype) {
  ZT_CHECK(capacity_ > 0, "empty gradient bucket");
  const char* skip = std::getenv("ZT_TEST_SKIP_WAIT");
  skip_wait_ = skip && std::string(skip) == "grad_bucket";
  const size_t elem = dtype_size(comm_dtype);
  for (Bucket& b : buckets_) {
    b.send = DeviceArray<unsigned char>(backend, capacity_ * elem);
    if (use_reduce_scatter_) b.recv = DeviceArray<unsigned char>(backend, std::min(capacity_, partition.partition_size) * elem);
  }
}

size_t GradBucketer::buffer_bytes() const {
  size_t total = 0;
  for (const Bucket& b : buckets_) total += b.send.bytes() + b.recv.bytes();
  return total;
}

void GradBucketer::add(size_t lo, const float* grads, size_t count) {
  const size_t elem = dtype_size(comm_dtype_);
  size_t hi = lo + count;
  while (count > 0) {
    Bucket* b = &buckets_[current_];
    if (b->hi != b->lo && hi != b->lo) {  // not directly below what the bucket holds
      flush();
      b = &buckets_[current_];
    }
    if (b->hi == b->lo) b->lo = b->hi = hi;
    // Fill from the top: the bucket holds [b->lo, b->hi) right-aligned in its buffer.
    const size_t take = std::min(capacity_ - (b->hi - b->lo), count);
    unsigned char* dst = b->send.data() + (capacity_ - (b->hi - (hi - take))) * elem;
    backend_.cast_async(grads + (count - take), DType::kF32, dst, comm_dtype_, take, compute_);
    b->lo = hi - take;
    hi -= take;
    count -= take;
    if (b->hi - b->lo == capacity_) flush();
  }
}

void GradBucketer::flush() {
  Bucket& b = buckets_[current_];
  if (b.hi == b.lo) return;
  const size_t len = b.hi - b.lo, elem = dtype_size(comm_dtype_);
  void* send = b.send.data() + (capacity_ - len) * elem;
  if (use_reduce_scatter_) {
    b.work = comm_.reduce_scatter(send, b.recv.data(), partition_.split(b.lo, b.hi), comm_dtype_, compute_);
  } else {
    b.work = comm_.all_reduce(send, len, comm_dtype_, compute_);
  }
  if (!overlap_) complete(b);
  current_ ^= 1;
  if (buckets_[current_].work) complete(buckets_[current_]);  // the other bucket must be free to fill
}

void GradBucketer::complete(Bucket& b) {
  if (!skip_wait_) b.work->wait(compute_);
  b.work.reset();
  const int rank = comm_.rank();
  const size_t lo = std::max(b.lo, partition_.begin(rank)), hi = std::min(b.hi, partition_.end(rank));
  if (hi > lo) {
    const size_t elem = dtype_size(comm_dtype_), len = b.hi - b.lo;
    const unsigned char* src = use_reduce_scatter_ ? b.recv.data()
                                                   : b.send.data() + (capacity_ - len + (lo - b.lo)) * elem;
    unsigned char* dst =
        static_cast<unsigned char*>(grad_partition_) + (lo - partition_.begin(rank)) * dtype_size(partition_dtype_);
    ops_.accumulate_into(dst, partition_dtype_, src, comm_dtype_, hi - lo);
    if (on_reduced_) on_reduced_(lo, hi);
  }
  b.lo = b.hi = 0;
}

void GradBucketer::finish() {
  flush();
  for (Bucket& b : buckets_) {
    if (b.work) complete(b);
  }
}

}  // namespace zt
