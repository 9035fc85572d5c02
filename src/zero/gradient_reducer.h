// Gradient reduction: every stage through one bucket path, the stage only choosing the policy.
//
//   stage   when                         collective                        result
//     0     at the step, whole buffer    all-reduce                        replaces the gradient
//     1     at the step, whole buffer    reduce-scatter (all-reduce when   replaces this rank's range
//                                        reduce_scatter is false)
//     2, 3  during backward, per unit    reduce-scatter (likewise)         added into the gradient
//                                                                          partition (it accumulates
//                                                                          over micro-steps)
//
// A bucket holds a contiguous flat range [lo, hi) in communication_data_type. During backward
// (DeepSpeed's IPG buckets) units finish from the top of the flat buffer down, so their
// gradients are cast into a bucket of reduce_bucket_size elements from its top; a full bucket is
// reduced while backward goes on (overlap_comm: two buckets, one filling while the other is
// reduced). At the step the 16-bit gradient buffer is reduced chunk by chunk, in place when the
// dtypes agree (no copy), else through a bucket. Sums, not means: the optimizer divides by the
// world size (DeepSpeed's post-scaling).
//
// Streams: buckets are filled and results written on the compute stream; a reduction runs on
// the communicator's stream after what compute has enqueued, and compute waits for it before it
// reads the result or fills that bucket again.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/comm_buffer.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "zero/mixed_precision_buffers.h"
#include "zero/partition_collectives.h"
#include "zero/quantized_reduce.h"
#include "zero/zero_plan.h"

namespace zt {

class GradientReducer {
 public:
  struct Policy {
    bool during_backward = false;  ///< stages 2, 3; else at the step (stages 0, 1)
    bool reduce_scatter = false;   ///< else all-reduce, keeping what this rank needs
    bool accumulate = false;       ///< add into the gradient (backward), else replace it (step)
  };
  static Policy policy(const ZeroPlan& plan, const ZeroConfig& config);
  /// Device bytes of the buckets a reducer allocates; `max_collective`: the transport's largest
  /// collective in elements (DataComm::max_collective_elements).
  static size_t buffer_bytes(const ZeroPlan& plan, const ZeroConfig& config, size_t max_collective,
                             int per_node = 0, size_t tensors = 0);
  /// The same buckets as one entry of bytes per device allocation (send and receive buffers).
  /// `per_node`: the ranks' nodes' size (RunShape::ranks_per_node) where qgZ may apply; `tensors`:
  /// the model's (ParamLayout::tensor_ranges), which qgZ's packets restart their blocks at.
  static std::vector<size_t> buffer_allocations(const ZeroPlan& plan, const ZeroConfig& config,
                                                size_t max_collective, int per_node = 0, size_t tensors = 0);
  /// qgZ (zero_quantized_gradients): the nodes' size L where the reduce-scatters go through
  /// QuantizedReduceScatter (stage 3, reduce_scatter, more than one node of L consecutive ranks);
  /// 0 where they stay plain.
  static int qgz_ranks_per_node(const ZeroPlan& plan, const ZeroConfig& config, const std::vector<int>& node_of_ranks);

  GradientReducer(const ZeroPlan& plan, const ZeroConfig& config, Backend& backend, DataComm& comm,
                  MixedPrecisionBuffers& buffers);

  bool reduces_during_backward() const { return policy_.during_backward; }
  /// During backward: adds the fp32 gradient of flat range [lo, lo + count). Ranges arrive from
  /// high offsets to low; a gap (or a range above the current bucket) flushes the bucket first.
  void add(size_t lo, const float* grads, size_t count);
  /// The end of a backward pass: reduces the partial bucket and waits for every reduction.
  void backward_done();
  /// At the step (stages 0, 1): reduces the whole gradient buffer. Nothing to do otherwise.
  void reduce_at_step();
  /// Called with each flat range [lo, hi) of the optimizer's range right after its reduced sum
  /// was written (ZeRO-Offload copies it to the host from here, beside backward).
  void on_reduced(std::function<void(size_t lo, size_t hi)> callback) { on_reduced_ = std::move(callback); }

  size_t buffer_bytes() const;
  /// Of them, those in the communicator's shared memory.
  size_t shared_bytes() const;

 private:
  struct Bucket {
    CommBuffer send;  // in the communicator's shared memory where it has some (the peers read it)
    DeviceArray<unsigned char> recv;
    size_t lo = 0, hi = 0;                 // the flat range held
    unsigned char* data = nullptr;  // where [lo, hi) is, in comm_dtype (send, or the gradient in place)
    std::shared_ptr<DataWork> work;
  };
  /// The buckets a reducer allocates: how many, and elements of comm_dtype in each buffer.
  struct BucketShape {
    int count = 0;
    size_t capacity = 0, send = 0, recv = 0;
  };
  static BucketShape bucket_shape(const ZeroPlan& plan, const ZeroConfig& config, size_t max_collective);
  /// Starts the collective on bucket `b`'s [lo, hi).
  void launch(Bucket& b);
  /// Waits for `b`'s collective, writes the kept part of the sum into the gradient, empties `b`.
  void complete(Bucket& b);
  /// Backward: launches the current bucket and switches to the other one.
  void flush();

  const ZeroPlan& plan_;
  const Policy policy_;
  Backend& backend_;
  Stream& compute_;
  DataComm& comm_;
  OptimizerOps& ops_;
  MixedPrecisionBuffers& buffers_;
  const BucketShape shape_;
  const size_t capacity_;
  const bool overlap_;
  std::function<void(size_t, size_t)> on_reduced_;
  Bucket buckets_[2];  // one fills while the other is reduced
  std::unique_ptr<QuantizedReduceScatter> qgz_;  // zero_quantized_gradients across nodes
  int current_ = 0;
  // Test hook (ZT_TEST_SKIP_WAIT=grad_bucket): leaves out the wait that orders the compute
  // stream after a bucket's reduction, so that a test can see the emulated backend catch it.
  bool skip_wait_ = false;
};

}  // namespace zt
