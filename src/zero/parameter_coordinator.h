// Stage 3 parameters (DeepSpeed's PartitionedParameterCoordinator): each rank holds only its
// partition, in a ParamStore (device memory, host memory with offload_param cpu, or NVMe); a unit's full weights are all-gathered
// before use and released after, within DeepSpeed's limits:
//   stage3_prefetch_bucket_size         elements gathered ahead of use, following the recorded
//                                       order of units of a micro-step (the trace)
//   stage3_max_live_parameters          elements gathered at once (prefetch included), never exceeded
//   stage3_max_reuse_distance           a released unit stays gathered if the trace uses it again
//                                       within this many elements
//   stage3_param_persistence_threshold  units at most this big stay gathered until the next step
// The trace is recorded during the first micro-step; until then nothing is prefetched and every
// unit is released after use. After an optimizer step every gathered copy is stale and dropped.
// Streams: a gather runs on the communicator's stream after what the compute stream has
// enqueued (so a reused buffer is no longer read), and the compute stream waits for it before
// the unit's first use.
// With zero_quantized_weights (ZeRO++ qwZ) each rank's slice is quantized to int8 on the compute
// stream before the gather, and the unit dequantized there once it has arrived
// (zero/quantized_gather.h): the gather's buffer ("wire") is held only while it is in flight.
// With MiCS's mics_hierarchical_params_gather, where the ranks lie on N > 1 nodes of L
// consecutive ranks (as DeepSpeed's _hierarchical_all_gather_params): a unit's gather first runs
// across the nodes among the ranks of this rank's local index l (ranks l, L + l, ...; "the rail"),
// into a staging buffer ("wire") in node order; then, once the unit is wanted, the node's ranks
// all-gather each node's pieces (N gathers) straight into place. Each rank's slice crosses the
// nodes once, to N - 1 ranks, instead of riding a ring of all the ranks.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "offload/optimizer_offload.h"
#include "offload/param_store.h"
#include "offload/param_swapper.h"
#include "model/param_layout.h"
#include "zero/partition.h"
#include "zero/quantized_gather.h"
#include "zero/zero_plan.h"

namespace zt {

/// The most elements of one unit that `rank` owns: the largest slice it contributes to a gather
/// (what a parameter store must be able to hand out at once).
size_t largest_owned_slice(const ParamLayout& layout, const PartitionMap& partition, int rank);

class PartitionedParameterCoordinator {
 public:
  /// Device bytes of gather buffers at most: stage3_max_live_parameters (or the model) in the
  /// training dtype, plus a working copy where the model computes in another dtype (fp32 in
  /// mixed precision with fp32 activations), plus one unit's worth kept for reuse; with qwZ the
  /// quantized packets of as many units.
  /// With the default reuse distance every unit stays gathered until the step.
  /// `hierarchical`: hierarchical_per_node's L (each live unit's staging counted too), or 0.
  static size_t gather_bytes(const ZeroPlan& plan, const ParamLayout& layout, const ZeroConfig& config,
                             int hierarchical = 0);
  /// The gather buffers behind that bound, one entry of bytes per device allocation: each
  /// gathered unit's buffer in the training dtype and its working copy, for the largest units whose
  /// elements fit under the bound (which units are live changes as the step runs; the CUDA view
  /// rounds each allocation of this worst case).
  static std::vector<size_t> gather_allocations(const ZeroPlan& plan, const ParamLayout& layout,
                                                const ZeroConfig& config, int hierarchical = 0);
  /// hpZ's secondary copy: the parameters cut over a group of plan.hpz ranks, in their dtype
  /// (DeepSpeed's ds_secondary_tensor, 1/hpz of the model a rank); 0 without hpZ.
  static size_t secondary_bytes(const ZeroPlan& plan);
  /// MiCS's hierarchical gathers: L, the ranks a node where they apply (mics_hierarchical_params_gather,
  /// ranks labelled by `node_of_ranks` on more than one node of L > 1 consecutive ranks); else 0.
  static int hierarchical_per_node(const ZeroConfig& config, const std::vector<int>& node_of_ranks);
  /// The staging bytes of `unit`'s hierarchical gather on `rank`, in nodes of `per_node` ranks.
  static size_t rail_bytes(const ZeroPlan& plan, const ParamLayout& layout, int per_node, int unit, int rank);
  /// What the parameter store allocates besides the plan's parameter buffer: ParamSwapper's
  /// resident part, file and read buffers with offload_param nvme (sized for the worst rank).
  static OffloadFootprint store_footprint(const ZeroPlan& plan, const ParamLayout& layout, const DsConfig& config);

  /// `params`: the plan's parameter buffer (this rank's partition), unless offload_param is nvme.
  PartitionedParameterCoordinator(const ZeroPlan& plan, const ParamLayout& layout, Backend& backend, DataComm& comm,
                                  void* params, const DsConfig& config);

  /// The unit's full weights in the plan's working dtype, valid until release(unit).
  const void* acquire(int unit);
  void release(int unit);
  /// Drops every gathered copy (the partitions changed).
  void invalidate();
  /// Inference: a forward pass is over, and the weights have not changed. Every gathered unit but
  /// the persistent ones is freed (DeepSpeed releases them at the end of each forward), the first
  /// pass's order of units becomes the trace, and with `another` (a pass follows) the next pass's
  /// first units are gathered ahead within stage3_prefetch_bucket_size. Collective: every rank
  /// ends the same passes.
  void end_pass(bool another);
  /// Elements [lo, hi) of the parameters in the training dtype, assembled from every rank's
  /// partition into host memory `out`. Collective.
  void gather_params(size_t lo, size_t hi, void* out);
  /// Where the optimizer writes updated parameters of this rank's partition.
  ParamStore& store() { return store_; }
  /// The store's swap file and buffers (zero without offload_param nvme).
  OffloadFootprint store_bytes() const;

  size_t live_elements() const { return live_elements_; }
  size_t peak_live_elements() const { return peak_live_elements_; }
  /// Bytes of gather buffers allocated (in use or kept for reuse): the gathered units and their
  /// working copies.
  size_t buffer_bytes() const { return allocated_bytes_; }

 private:
  enum BufferKind { kRaw, kWorking, kWire, kBufferKinds };
  struct Gathered {
    DeviceArray<unsigned char> raw;      // the unit in `dtype`
    DeviceArray<unsigned char> working;  // its copy in the working dtype, where that differs
    DeviceArray<unsigned char> wire;     // qwZ: the quantized packets, until dequantized into raw;
                                         // hierarchical: the rail's pieces, until the node's gathers
    std::optional<QuantizedSplit> split;  // qwZ: where the packets lie in `wire`
    std::shared_ptr<DataWork> pending;
    bool rail = false;  // hierarchical: `pending` is the rail's gather; the node's follow in complete
    int unit = -1;
    bool fills_secondary = false;  // hpZ: copy this rank's part into the secondary once complete
    const void* source = nullptr;  // this rank's slice, held in the store until `pending` is done
    bool converted = false, in_use = false;
  };
  void gather(int unit);
  /// Starts the all-gather of `g`'s unit over `over`, each rank's part as `map` cuts it, this
  /// rank's at `mine`: plain, or `quantize`d packets (qwZ).
  void start_gather(Gathered& g, DataComm& over, const PartitionMap& map, const void* mine, bool quantize);
  /// Hierarchical: the node's gathers of g's unit from the rail's pieces in `wire`, each node's
  /// into place; waited on the compute stream.
  void gather_in_node(Gathered& g);
  /// Waits for a unit's all-gather and hands its slice back to the store.
  void complete(Gathered& g);
  /// The part of `unit` this rank owns, as [lo, hi) of its partition (empty: lo == hi).
  std::pair<size_t, size_t> owned_slice(int unit) const;
  void drop(int unit);
  /// A buffer of exactly `bytes` from the free list of its kind, or a new one: gather buffers are
  /// reused, since writing into freshly allocated pages runs at a fraction of the speed
  /// (docs/design.md).
  DeviceArray<unsigned char> take_buffer(size_t bytes, BufferKind kind);
  void give_back(DeviceArray<unsigned char>&& buffer, BufferKind kind);
  void make_room(size_t elements, int keep_unit);
  size_t distance_to_next_use(int unit) const;
  void prefetch();
  bool persistent(int unit) const;

  const ParamLayout& layout_;
  Backend& backend_;
  DataComm& comm_;
  PartitionMap partition_;
  DType dtype_, working_dtype_;
  std::unique_ptr<ParamStore> store_owner_;
  ParamSwapper* swapper_ = nullptr;  // store_owner_ with offload_param nvme
  ParamStore& store_;
  size_t max_live_, prefetch_limit_, max_reuse_, persistence_;
  bool quantized_;  // zero_quantized_weights
  std::vector<size_t> cuts_;  // qwZ: where its blocks restart (tensor_starts)
  // hpZ (ZeroPlan::hpz): the group's communicator, this rank's part of the secondary copy (the
  // parameters cut over the group's ranks) and which units it holds since the last step.
  std::unique_ptr<DataComm> group_;
  PartitionMap secondary_;
  DeviceArray<unsigned char> secondary_buffer_;
  std::vector<char> secondary_valid_;
  // MiCS's hierarchical gathers: L, the communicators of this rank's local index across the nodes
  // and of its node.
  int per_node_ = 0;
  std::unique_ptr<DataComm> rail_, node_;
  std::map<int, Gathered> live_;
  std::multimap<size_t, DeviceArray<unsigned char>> free_[kBufferKinds];  // by bytes

  size_t live_elements_ = 0, peak_live_elements_ = 0, allocated_bytes_ = 0;
  std::vector<int> trace_;
  bool trace_complete_ = false;
  size_t position_ = 0;  // index in trace_ of the next expected acquire
};

}  // namespace zt
