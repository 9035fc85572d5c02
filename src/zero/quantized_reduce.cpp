#include "zero/quantized_reduce.h"

#include <algorithm>

#include "comm/block_offsets.h"
#include "comm/traffic.h"
#include "core/error.h"
#include "zero/quantized_gather.h"

namespace zt {

namespace {

constexpr int kBits = 4;

// Done once `compute` has run what was enqueued before it: every step of the reduction is ordered
// there.
class ComputeOrderedWork final : public DataWork {
 public:
  ComputeOrderedWork(Backend& backend, Stream& compute) : backend_(backend), compute_(compute) {
    backend_.record(*done_, compute_);
  }
  void wait(Stream& stream) override {
    if (&stream != &compute_) backend_.wait(stream, *done_);
  }
  void synchronize() override { backend_.synchronize(*done_); }

 private:
  Backend& backend_;
  Stream& compute_;
  std::unique_ptr<Event> done_ = backend_.create_event();
};

// Words of packets of `total` elements in all, in `segments` runs (n packets cut at tensors): a
// word a block and a word per eight values, each run rounding both up once.
size_t packets_bound(size_t total, size_t segments) { return total / 8 + total / kQuantBlockInt4 + 2 * segments + 1; }

}  // namespace

std::vector<size_t> QuantizedReduceScatter::buffer_allocations(size_t capacity, const PartitionMap& partition,
                                                               DType dtype, int per_node, size_t tensors) {
  const size_t nodes = size_t(partition.world_size / per_node), e = dtype_size(dtype);
  const size_t mine = std::min(capacity, partition.partition_size);  // this rank's range of a bucket, at most
  return {capacity * e,                                              // the bucket regrouped
          capacity * e,                                              // the node's sums for local index l
          4 * packets_bound(capacity, nodes + tensors),              // the packets sent
          4 * nodes * packets_bound(mine, 1 + tensors),              // the packets received
          mine * sizeof(float), mine * sizeof(float)};               // their sum and one term
}

size_t QuantizedReduceScatter::exchange_bytes(const PartitionMap& partition, size_t lo, size_t hi,
                                              const std::vector<size_t>& cuts) {
  return QuantizedSplit(partition.split(lo, hi), kBits, partition.starts(lo, hi), cuts).bytes();
}

QuantizedReduceScatter::QuantizedReduceScatter(Backend& backend, DataComm& comm, int per_node,
                                               const PartitionMap& partition, size_t capacity, DType dtype,
                                               std::vector<size_t> cuts)
    : backend_(backend), partition_(partition), dtype_(dtype), per_node_(per_node),
      nodes_(partition.world_size / per_node), rank_(comm.rank()), cuts_(std::move(cuts)) {
  ZT_CHECK(per_node >= 1 && partition.world_size % per_node == 0 && comm.size() == partition.world_size,
           "qgZ: ", per_node, " ranks a node over ", comm.size(), " ranks");
  node_ = comm.split(rank_ / per_node_);    // the node's ranks
  across_ = comm.split(rank_ % per_node_);  // this local index on every node
  const std::vector<size_t> bytes = buffer_allocations(capacity, partition, dtype, per_node, cuts_.size());
  grouped_ = DeviceArray<unsigned char>(backend, bytes[0]);
  node_sum_ = DeviceArray<unsigned char>(backend, bytes[1]);
  send_packets_ = DeviceArray<unsigned char>(backend, bytes[2]);
  recv_packets_ = DeviceArray<unsigned char>(backend, bytes[3]);
  sum_ = DeviceArray<float>(backend, bytes[4] / sizeof(float));
  term_ = DeviceArray<float>(backend, bytes[5] / sizeof(float));
}

size_t QuantizedReduceScatter::buffer_bytes() const {
  return grouped_.bytes() + node_sum_.bytes() + send_packets_.bytes() + recv_packets_.bytes() + sum_.bytes() +
         term_.bytes();
}

std::shared_ptr<DataWork> QuantizedReduceScatter::reduce_scatter(const void* send, void* recv, size_t lo, size_t hi,
                                                                 Stream& compute) {
  const std::vector<size_t> counts = partition_.split(lo, hi), offsets = block_offsets(counts);
  const std::vector<size_t> starts = partition_.starts(lo, hi);
  const size_t e = dtype_size(dtype_);
  const int local = rank_ % per_node_;
  // 1. Regrouped by local index, reduce-scattered inside the node.
  std::vector<size_t> node_counts(size_t(per_node_), 0);
  size_t at = 0;
  for (int l = 0; l < per_node_; ++l) {
    for (int n = 0; n < nodes_; ++n) {
      const size_t r = size_t(n * per_node_ + l);
      if (counts[r] > 0) {
        backend_.copy_async(grouped_.data() + at * e, static_cast<const unsigned char*>(send) + offsets[r] * e,
                            counts[r] * e, compute);
      }
      at += counts[r];
      node_counts[size_t(l)] += counts[r];
    }
  }
  node_->reduce_scatter(grouped_.data(), node_sum_.data(), node_counts, dtype_, compute)->wait(compute);
  // 2. Each node's range in int4, across the nodes.
  const QuantizedSplit out(of_local_index(counts, per_node_, local), kBits, of_local_index(starts, per_node_, local),
                          cuts_);
  ZT_CHECK(out.bytes() <= send_packets_.bytes(), "qgZ: packets of ", out.bytes(), " bytes for a buffer of ",
           send_packets_.bytes());
  size_t from = 0;
  for (int n = 0; n < nodes_; ++n) {
    quantize_packet(backend_, out, n, node_sum_.data() + from * e, dtype_, send_packets_.data());
    from += out.counts[size_t(n)];
  }
  const size_t mine = counts[size_t(rank_)];
  const QuantizedSplit in(std::vector<size_t>(size_t(nodes_), mine), kBits,
                          std::vector<size_t>(size_t(nodes_), starts[size_t(rank_)]), cuts_);
  ZT_CHECK(in.bytes() <= recv_packets_.bytes(), "qgZ: packets of ", in.bytes(), " bytes received into ",
           recv_packets_.bytes());
  across_->all_to_all_v(send_packets_.data(), out.words, recv_packets_.data(), in.words, DType::kF32, compute)
      ->wait(compute);
  // 3. This rank's range: the nodes' terms summed in fp32, in node order, rounded once.
  if (mine > 0) {
    OptimizerOps& ops = backend_.optimizer_ops();
    for (int n = 0; n < nodes_; ++n) {
      // Node n's packet: the first into the sum, the others beside it.
      dequantize_packet(backend_, in, n, recv_packets_.data(), n == 0 ? sum_.data() : term_.data(), DType::kF32);
      if (n > 0) ops.accumulate_into(sum_.data(), DType::kF32, term_.data(), DType::kF32, mine);
    }
    backend_.cast_async(sum_.data(), DType::kF32, recv, dtype_, mine, compute);
  }
  return std::make_shared<ComputeOrderedWork>(backend_, compute);
}

}  // namespace zt
