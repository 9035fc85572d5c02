#include "zero/gradient_reducer.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "comm/traffic.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/quantized_gather.h"

namespace zt {

GradientReducer::Policy GradientReducer::policy(const ZeroPlan& plan, const ZeroConfig& config) {
  Policy p;
  p.during_backward = plan.stage >= 2;
  // Stage 0 keeps the whole sum; the others keep their partition, which reduce_scatter: false
  // (DeepSpeed's flag) cuts out of an all-reduce instead.
  p.reduce_scatter = plan.stage >= 1 && config.reduce_scatter;
  p.accumulate = p.during_backward;
  return p;
}

GradientReducer::BucketShape GradientReducer::bucket_shape(const ZeroPlan& plan, const ZeroConfig& config,
                                                          size_t max_collective) {
  const Policy p = policy(plan, config);
  BucketShape b;
  b.capacity = collective_chunk(plan.partition, max_collective, config.reduce_bucket_size);
  b.recv = p.reduce_scatter ? std::min(b.capacity, plan.partition.partition_size) : 0;
  if (p.during_backward) {  // two buckets: one fills while the other is reduced
    b.count = 2;
    b.send = b.capacity;
  } else if (plan.world > 1) {  // one bucket at the step, in place when the dtypes agree
    b.count = 1;
    b.send = plan.comm_dtype != plan.grad_dtype ? b.capacity : 0;
  }  // else nothing to reduce at the step
  return b;
}

int GradientReducer::qgz_ranks_per_node(const ZeroPlan& plan, const ZeroConfig& config,
                                        const std::vector<int>& node_of_ranks) {
  if (!config.zero_quantized_gradients || plan.stage != 3 || !policy(plan, config).reduce_scatter) return 0;
  return block_ranks_per_node(node_of_ranks);
}

std::vector<size_t> GradientReducer::buffer_allocations(const ZeroPlan& plan, const ZeroConfig& config,
                                                       size_t max_collective, int per_node, size_t tensors) {
  const BucketShape b = bucket_shape(plan, config, max_collective);
  const size_t ce = dtype_size(plan.comm_dtype);
  std::vector<size_t> bytes;
  for (int i = 0; i < b.count; ++i) {
    for (size_t n : {b.send, b.recv}) {
      if (n > 0) bytes.push_back(n * ce);  // an empty DeviceArray allocates nothing
    }
  }
  const int qgz = per_node > 0 ? qgz_ranks_per_node(plan, config, block_nodes(plan.world, per_node)) : 0;
  if (qgz > 0) {
    for (size_t n : QuantizedReduceScatter::buffer_allocations(b.capacity, plan.partition, plan.comm_dtype, qgz,
                                                                tensors)) {
      bytes.push_back(n);
    }
  }
  return bytes;
}

size_t GradientReducer::buffer_bytes(const ZeroPlan& plan, const ZeroConfig& config, size_t max_collective,
                                     int per_node, size_t tensors) {
  size_t total = 0;
  for (size_t n : buffer_allocations(plan, config, max_collective, per_node, tensors)) total += n;
  return total;
}

GradientReducer::GradientReducer(const ZeroPlan& plan, const ZeroConfig& config, Backend& backend, DataComm& comm,
                                 MixedPrecisionBuffers& buffers)
    : plan_(plan), policy_(policy(plan, config)), backend_(backend), compute_(backend.compute_stream()), comm_(comm),
      ops_(backend.optimizer_ops()), buffers_(buffers), shape_(bucket_shape(plan, config, comm.max_collective_elements())),
      capacity_(shape_.capacity), overlap_(config.overlap_comm) {
  ZT_CHECK(capacity_ > 0, "empty gradient bucket");
  const char* skip = std::getenv("ZT_TEST_SKIP_WAIT");
  skip_wait_ = skip && std::string(skip) == "grad_bucket";
  const size_t ce = dtype_size(plan.comm_dtype);
  for (int i = 0; i < shape_.count; ++i) {
    // The collectives' inputs: shared memory where the communicator has it (collective).
    buckets_[i].send = shape_.send > 0 ? CommBuffer(comm, backend, shape_.send * ce) : CommBuffer();
    buckets_[i].recv = DeviceArray<unsigned char>(backend, shape_.recv * ce);
  }
  if (config.zero_quantized_gradients && plan.stage == 3) {
    const int per_node = qgz_ranks_per_node(plan, config, comm.node_of_ranks());
    if (per_node > 0) {
      qgz_ = std::make_unique<QuantizedReduceScatter>(backend, comm, per_node, plan.partition, capacity_,
                                                      plan.comm_dtype, tensor_starts(buffers.layout().tensor_ranges()));
    } else if (comm.rank() == 0) {
      log_info("zero_quantized_gradients: the ranks are not on several nodes of equal size with consecutive ranks, "
               "so gradients are reduce-scattered unquantized (as DeepSpeed on one node)");
    }
  }
}

size_t GradientReducer::buffer_bytes() const {
  size_t total = 0;
  for (const Bucket& b : buckets_) total += b.send.bytes() + b.recv.bytes();
  return total + (qgz_ ? qgz_->buffer_bytes() : 0);
}

size_t GradientReducer::shared_bytes() const {
  size_t total = 0;
  for (const Bucket& b : buckets_) total += b.send.shared() ? b.send.bytes() : 0;
  return total;
}

void GradientReducer::launch(Bucket& b) {
  const DType ce = plan_.comm_dtype;
  if (qgz_) {
    b.work = qgz_->reduce_scatter(b.data, b.recv.data(), b.lo, b.hi, compute_);
  } else if (policy_.reduce_scatter) {
    b.work = comm_.reduce_scatter(b.data, b.recv.data(), plan_.partition.split(b.lo, b.hi), ce, compute_);
  } else {
    b.work = comm_.all_reduce(b.data, b.hi - b.lo, ce, compute_);
  }
}

void GradientReducer::complete(Bucket& b) {
  if (!skip_wait_) b.work->wait(compute_);
  b.work.reset();
  // What this rank keeps: its optimizer range (everything at stage 0).
  const size_t lo = std::max(b.lo, plan_.opt_begin), hi = std::min(b.hi, plan_.opt_end());
  if (hi > lo) {
    // A reduce-scatter received exactly the kept range; an all-reduce left the whole bucket.
    const unsigned char* sum =
        policy_.reduce_scatter ? b.recv.data() : b.data + (lo - b.lo) * dtype_size(plan_.comm_dtype);
    unsigned char* grad = buffers_.grad_at(lo);
    if (policy_.accumulate) {
      ops_.accumulate_into(grad, plan_.grad_dtype, sum, plan_.comm_dtype, hi - lo);
    } else if (sum != grad) {
      backend_.cast_async(sum, plan_.comm_dtype, grad, plan_.grad_dtype, hi - lo, compute_);
    }
    if (on_reduced_) on_reduced_(lo, hi);
  }
  b.lo = b.hi = 0;
  b.data = nullptr;
}

void GradientReducer::add(size_t lo, const float* grads, size_t count) {
  ZT_CHECK(policy_.during_backward, "gradients added to a reducer that reduces at the step");
  const size_t ce = dtype_size(plan_.comm_dtype);
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
    unsigned char* dst = b->send.data() + (capacity_ - (b->hi - (hi - take))) * ce;
    backend_.cast_async(grads + (count - take), DType::kF32, dst, plan_.comm_dtype, take, compute_);
    b->lo = hi - take;
    hi -= take;
    count -= take;
    if (b->hi - b->lo == capacity_) flush();
  }
}

void GradientReducer::flush() {
  Bucket& b = buckets_[current_];
  if (b.hi == b.lo) return;
  b.data = b.send.data() + (capacity_ - (b.hi - b.lo)) * dtype_size(plan_.comm_dtype);
  launch(b);
  if (!overlap_) complete(b);
  current_ ^= 1;
  if (buckets_[current_].work) complete(buckets_[current_]);  // the other bucket must be free to fill
}

void GradientReducer::backward_done() {
  if (!policy_.during_backward) return;
  flush();
  for (Bucket& b : buckets_) {
    if (b.work) complete(b);
  }
}

void GradientReducer::reduce_at_step() {
  if (policy_.during_backward) return;
  if (plan_.world == 1) {  // the gradient is the sum already
    if (on_reduced_ && plan_.opt_count > 0) on_reduced_(plan_.opt_begin, plan_.opt_end());
    return;
  }
  // In chunks of one bucket. In place, an all-reduce leaves nothing to reuse: queue every chunk
  // and complete them at the end. A chunk that goes through the bucket's buffers completes
  // before the next one fills them.
  const bool in_place = plan_.grads_reduced_in_place();
  std::vector<Bucket> queued;
  const size_t padded = plan_.partition.padded_size;
  for (size_t lo = 0; lo < padded; lo += capacity_) {
    Bucket& b = buckets_[0];
    b.lo = lo;
    b.hi = std::min(padded, lo + capacity_);
    b.data = buffers_.grad_at(lo);
    if (!in_place) {
      backend_.cast_async(b.data, plan_.grad_dtype, b.send.data(), plan_.comm_dtype, b.hi - b.lo, compute_);
      b.data = b.send.data();
    }
    launch(b);
    if (in_place && !policy_.reduce_scatter) {
      queued.push_back(Bucket{{}, {}, b.lo, b.hi, b.data, std::move(b.work)});
      b.lo = b.hi = 0;
      continue;
    }
    complete(b);
  }
  for (Bucket& b : queued) complete(b);
}

}  // namespace zt
