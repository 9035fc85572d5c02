// qgZ (DeepSpeed's zero_quantized_gradients, stage 3): a gradient bucket's reduce-scatter in two
// levels over N > 1 nodes of L consecutive ranks, the step across nodes in int4. For the bucket's
// ranges of every rank (PartitionMap::split):
//   1. the bucket regrouped by the destinations' local index (ranks l, L + l, 2L + l, ... together),
//      and reduce-scattered inside the node (a group communicator of the node's ranks) in the
//      communication dtype: local rank l gets its node's sums for the ranks with local index l;
//   2. each of those N ranges quantized to int4 (blocks of kQuantBlockInt4, DeepSpeed's symmetric
//      rule; zero/quantized_gather.h's packets) and exchanged across the nodes among the ranks
//      with local index l (an all_to_all_v: the ranges differ in length);
//   3. the N packets for this rank dequantized and summed in fp32 in node order, and rounded once
//      into the communication dtype: this rank's range of the sum over all ranks.
// DeepSpeed's all_to_all_quant_reduce also quantizes inside the node (an int4 all-to-all, then
// dequantize, sum and quantize again); here the node's step is a plain reduce-scatter (shared
// memory or NVLink carry it), so a gradient is quantized once, not twice, and only the bytes
// across nodes are int4. As DeepSpeed, one node means a plain reduce-scatter (the engine's).
//
// Every step is ordered on the compute stream (the kernels run there; each exchange waits there):
// the reduction does not overlap backward on a synchronous backend.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "zero/partition.h"

namespace zt {

class QuantizedReduceScatter {
 public:
  /// Device bytes it allocates for buckets of `capacity` elements, one entry a buffer, over a
  /// model of `tensors` tensors.
  static std::vector<size_t> buffer_allocations(size_t capacity, const PartitionMap& partition, DType dtype,
                                                int per_node, size_t tensors);
  /// The int4 packets' bytes each rank hands the exchange across nodes for the bucket [lo, hi),
  /// summed over the ranks, blocks restarting at `cuts` (the estimate's).
  static size_t exchange_bytes(const PartitionMap& partition, size_t lo, size_t hi, const std::vector<size_t>& cuts);

  /// Splits `comm` into its nodes and its local indexes (collective); buckets of at most
  /// `capacity` elements of `dtype`; blocks restart at every tensor start `cuts` (tensor_starts).
  QuantizedReduceScatter(Backend& backend, DataComm& comm, int per_node, const PartitionMap& partition, size_t capacity,
                         DType dtype, std::vector<size_t> cuts);

  /// The sum over ranks of `send` (the bucket [lo, hi) of the flat buffer, in the dtype) into
  /// `recv` for this rank's range of it, after what `compute` has enqueued; `compute` is ordered
  /// after it on return.
  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, size_t lo, size_t hi, Stream& compute);

  size_t buffer_bytes() const;

 private:
  Backend& backend_;
  const PartitionMap partition_;
  const DType dtype_;
  const int per_node_, nodes_, rank_;
  const std::vector<size_t> cuts_;
  std::unique_ptr<DataComm> node_, across_;
  DeviceArray<unsigned char> grouped_, node_sum_, send_packets_, recv_packets_;
  DeviceArray<float> sum_, term_;
};

}  // namespace zt
