#include "zero/parameter_coordinator.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "comm/block_offsets.h"
#include "comm/traffic.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/comm_estimate.h"

namespace zt {

size_t largest_owned_slice(const ParamLayout& layout, const PartitionMap& partition, int rank) {
  size_t largest = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t lo = std::max(layout.unit_offset(u), partition.begin(rank));
    const size_t hi = std::min(layout.unit_offset(u) + layout.unit_size(u), partition.end(rank));
    if (hi > lo) largest = std::max(largest, hi - lo);
  }
  return largest;
}

namespace {

// Elements of gather buffers allocated at most (stage 3).
size_t gathered_elements_bound(const ParamLayout& layout, const ZeroConfig& config) {
  const size_t flat = layout.flat_size();
  const size_t cap = size_t(std::min<int64_t>(config.stage3_max_live_parameters, int64_t(flat)));
  // Freed buffers are kept for reuse by size, so up to one more unit's worth may be allocated
  // than is live.
  return std::min(cap < flat ? cap + layout.max_unit_size() : cap, flat);
}

// The units whose buffers make the worst case of gathered_elements_bound: the largest first.
std::vector<int> largest_units_under_bound(const ParamLayout& layout, const ZeroConfig& config) {
  std::vector<int> units;
  for (int u = 0; u < layout.num_units(); ++u) units.push_back(u);
  std::stable_sort(units.begin(), units.end(), [&](int a, int b) { return layout.unit_size(a) > layout.unit_size(b); });
  size_t room = gathered_elements_bound(layout, config);
  std::vector<int> out;
  for (int u : units) {
    const size_t n = layout.unit_size(u);
    if (n == 0 || n > room) continue;
    room -= n;
    out.push_back(u);
  }
  return out;
}

}  // namespace

int PartitionedParameterCoordinator::hierarchical_per_node(const ZeroConfig& config,
                                                           const std::vector<int>& node_of_ranks) {
  // Nodes of one rank leave the node's step nothing to do: one level then.
  const int per_node = config.mics_hierarchical_params_gather ? block_ranks_per_node(node_of_ranks) : 0;
  return per_node > 1 ? per_node : 0;
}

size_t PartitionedParameterCoordinator::rail_bytes(const ZeroPlan& plan, const ParamLayout& layout, int per_node,
                                                   int unit, int rank) {
  if (per_node <= 0) return 0;
  const size_t lo = layout.unit_offset(unit), hi = lo + layout.unit_size(unit);
  const std::vector<size_t> rail = of_local_index(plan.partition.split(lo, hi), per_node, rank % per_node);
  return std::accumulate(rail.begin(), rail.end(), size_t(0)) * plan.elem();
}

size_t PartitionedParameterCoordinator::secondary_bytes(const ZeroPlan& plan) {
  return plan.hpz > 1 ? plan.secondary.partition_size * plan.elem() : 0;
}

size_t PartitionedParameterCoordinator::gather_bytes(const ZeroPlan& plan, const ParamLayout& layout,
                                                    const ZeroConfig& config, int hierarchical) {
  if (plan.stage != 3) return 0;
  const size_t elements = gathered_elements_bound(layout, config);
  size_t bytes = elements * (plan.elem() + (plan.working_copies() ? plan.working_elem() : 0));
  // qwZ's packets: a byte an element, a scale a block, and per rank at most one more block's
  // scale for each tensor and unit it starts in, and 3 bytes of padding a unit (QuantizedSplit).
  if (config.zero_quantized_weights) {
    const size_t world = size_t(plan.world), units = size_t(layout.num_units());
    bytes += elements + 4 * QuantizedSplit::blocks(elements) + 4 * world * (layout.tensor_ranges().size() + units) +
             3 * world * units;
  }
  if (hierarchical > 0) {  // each live unit's staging, held from its gather to its first use: the worst rail's
    const std::vector<int> units = largest_units_under_bound(layout, config);
    size_t most = 0;
    for (int local = 0; local < hierarchical; ++local) {
      size_t rail = 0;
      for (int u : units) rail += rail_bytes(plan, layout, hierarchical, u, local);
      most = std::max(most, rail);
    }
    bytes += most;
  }
  return bytes + secondary_bytes(plan);
}

std::vector<size_t> PartitionedParameterCoordinator::gather_allocations(const ZeroPlan& plan,
                                                                        const ParamLayout& layout,
                                                                        const ZeroConfig& config, int hierarchical) {
  std::vector<size_t> bytes;
  if (plan.stage != 3) return bytes;
  if (plan.hpz > 1) bytes.push_back(secondary_bytes(plan));
  for (int u : largest_units_under_bound(layout, config)) {
    const size_t n = layout.unit_size(u), lo = layout.unit_offset(u);
    bytes.push_back(n * plan.elem());                                          // the gathered unit
    if (plan.working_copies()) bytes.push_back(n * plan.working_elem());  // its working copy
    if (config.zero_quantized_weights) {
      const QuantizedSplit split(plan.partition.split(lo, lo + n), 8, plan.partition.starts(lo, lo + n),
                                 tensor_starts(layout.tensor_ranges()));
      bytes.push_back(split.bytes());
    }
    if (hierarchical > 0) bytes.push_back(rail_bytes(plan, layout, hierarchical, u, plan.rank));
  }
  return bytes;
}

OffloadFootprint PartitionedParameterCoordinator::store_footprint(const ZeroPlan& plan, const ParamLayout& layout,
                                                                  const DsConfig& config) {
  if (!plan.params_on_nvme) return {};
  size_t largest_slice = 0;  // the worst rank's, so that the estimate holds for every rank
  for (int r = 0; r < plan.world; ++r) {
    largest_slice = std::max(largest_slice, largest_owned_slice(layout, plan.partition, r));
  }
  return ParamSwapper::footprint(config.zero.offload_param, plan.partition.partition_size, plan.dtype, largest_slice);
}

namespace {

std::unique_ptr<ParamStore> make_store(const ZeroPlan& plan, const ParamLayout& layout, Backend& backend,
                                       void* params, const DsConfig& config) {
  if (!plan.params_on_nvme) return std::make_unique<HostParamStore>(params, plan.dtype, backend);
  return std::make_unique<ParamSwapper>(backend, config.zero.offload_param, config.aio, plan.partition.partition_size,
                                        plan.dtype, largest_owned_slice(layout, plan.partition, plan.rank),
                                        plan.rank);
}

}  // namespace

PartitionedParameterCoordinator::PartitionedParameterCoordinator(const ZeroPlan& plan, const ParamLayout& layout,
                                                                 Backend& backend, DataComm& comm, void* params,
                                                                 const DsConfig& config)
    : layout_(layout), backend_(backend), comm_(comm), partition_(plan.partition), dtype_(plan.dtype),
      working_dtype_(plan.working_dtype), store_owner_(make_store(plan, layout, backend, params, config)),
      swapper_(plan.params_on_nvme ? static_cast<ParamSwapper*>(store_owner_.get()) : nullptr),
      store_(*store_owner_),
      max_live_(size_t(config.zero.stage3_max_live_parameters)),
      prefetch_limit_(size_t(config.zero.stage3_prefetch_bucket_size)),
      max_reuse_(size_t(config.zero.stage3_max_reuse_distance)),
      persistence_(size_t(config.zero.stage3_param_persistence_threshold)),
      quantized_(config.zero.zero_quantized_weights),
      cuts_(quantized_ ? tensor_starts(layout.tensor_ranges()) : std::vector<size_t>()) {
  if (plan.hpz > 1) {  // collective: every rank builds its coordinator at the same point
    group_ = comm.split(plan.rank / plan.hpz);
    secondary_ = plan.secondary;
    secondary_buffer_ = DeviceArray<unsigned char>(backend, secondary_.partition_size * plan.elem());
    allocated_bytes_ += secondary_buffer_.size();
    secondary_valid_.assign(size_t(layout.num_units()), 0);
  }
  per_node_ = hierarchical_per_node(config.zero, comm.node_of_ranks());
  if (per_node_ > 0) {  // collective, as hpZ's split
    rail_ = comm.split(comm.rank() % per_node_);
    node_ = comm.split(comm.rank() / per_node_);
    if (comm.rank() == 0) {
      log_info("mics_hierarchical_params_gather: a shard group's gathers run across its ",
               node_words(comm.node_of_ranks()), " among the ranks of each local index, then inside each node");
    }
  } else if (config.zero.mics_hierarchical_params_gather && comm.rank() == 0) {
    log_info("mics_hierarchical_params_gather: the ", comm.size(), " ranks of a shard group are not on several nodes "
             "of 2 or more ranks each (", node_words(comm.node_of_ranks()), "): one-level gathers");
  }
  const size_t largest = layout.max_unit_size();
  if (largest > max_live_) {
    throw UsageError(cat("zero_optimization.stage3_max_live_parameters (", max_live_,
                         ") is smaller than the largest unit of the model (", largest,
                         " parameters), which must be gathered whole"));
  }
}

OffloadFootprint PartitionedParameterCoordinator::store_bytes() const {
  OffloadFootprint f;
  if (!swapper_) return f;
  f.host_state = swapper_->host_bytes();
  f.nvme = swapper_->nvme_bytes();
  f.buffers = swapper_->buffer_bytes();
  return f;
}

void PartitionedParameterCoordinator::gather_params(size_t lo, size_t hi, void* out) {
  const int rank = comm_.rank();
  const size_t begin = partition_.begin(rank), end = partition_.end(rank);
  const size_t a = std::min(std::max(lo, begin), end), b = std::max(std::min(hi, end), a);
  const void* mine = store_.acquire(a - begin, b - begin);
  comm_.all_gather(mine, out, partition_.split(lo, hi), dtype_, backend_.compute_stream())->synchronize();
  store_.release(mine);
}

bool PartitionedParameterCoordinator::persistent(int unit) const { return layout_.unit_size(unit) <= persistence_; }

DeviceArray<unsigned char> PartitionedParameterCoordinator::take_buffer(size_t bytes, BufferKind kind) {
  auto& pool = free_[kind];
  auto it = pool.find(bytes);
  if (it == pool.end()) {
    allocated_bytes_ += bytes;
    return DeviceArray<unsigned char>(backend_, bytes);
  }
  DeviceArray<unsigned char> buffer = std::move(it->second);
  pool.erase(it);
  return buffer;
}

void PartitionedParameterCoordinator::give_back(DeviceArray<unsigned char>&& buffer, BufferKind kind) {
  if (buffer.size() == 0) return;
  free_[kind].emplace(buffer.size(), std::move(buffer));
}

void PartitionedParameterCoordinator::gather(int unit) {
  const size_t lo = layout_.unit_offset(unit), n = layout_.unit_size(unit);
  make_room(n, unit);
  Gathered& g = live_[unit];
  g.unit = unit;
  g.raw = take_buffer(n * dtype_size(dtype_), kRaw);
  if (dtype_ != working_dtype_) g.working = take_buffer(n * dtype_size(working_dtype_), kWorking);
  live_elements_ += n;
  peak_live_elements_ = std::max(peak_live_elements_, live_elements_);
  if (group_ && secondary_valid_[size_t(unit)]) {
    // hpZ: gathered once since the parameters changed, so the group's secondary copy has it.
    const size_t begin = secondary_.begin(group_->rank()), end = secondary_.end(group_->rank());
    const size_t a = std::min(std::max(lo, begin), end);
    // Unquantized under qwZ too: the secondary holds the values the first gather delivered, so
    // backward computes with forward's weights (quantizing them again, as DeepSpeed does, would
    // round them a second time, on other block boundaries); the group's gathers stay inside a
    // node, where bytes are cheap.
    start_gather(g, *group_, secondary_, secondary_buffer_.data() + (a - begin) * dtype_size(dtype_), false);
    return;
  }
  // Every rank contributes the part of [lo, lo + n) it owns, straight from its partition's store
  // (which may have to read it from NVMe; with every store buffer held by a gather in flight,
  // the oldest of those finishes first).
  const auto [a, b] = owned_slice(unit);
  while (!store_.can_acquire()) {
    auto oldest = std::find_if(live_.begin(), live_.end(), [](const auto& e) { return e.second.source != nullptr; });
    ZT_CHECK(oldest != live_.end(), "the parameter store has no free buffer and no gather holds one");
    complete(oldest->second);
  }
  g.source = store_.acquire(a, b);
  if (group_) {  // hpZ: this gather fills the unit's part of the secondary copy (complete)
    g.fills_secondary = true;
    secondary_valid_[size_t(unit)] = 1;
  }
  if (rail_) {  // MiCS's hierarchical gather: across the nodes now, in the node at first use
    const std::vector<size_t> rail = of_local_index(partition_.split(lo, lo + n), per_node_, comm_.rank() % per_node_);
    g.wire = take_buffer(std::accumulate(rail.begin(), rail.end(), size_t(0)) * dtype_size(dtype_), kWire);
    g.pending = rail_->all_gather(g.source, g.wire.data(), rail, dtype_, backend_.compute_stream());
    g.rail = true;
    return;
  }
  start_gather(g, comm_, partition_, g.source, quantized_);
}

void PartitionedParameterCoordinator::gather_in_node(Gathered& g) {
  const size_t lo = layout_.unit_offset(g.unit), elem = dtype_size(dtype_);
  const std::vector<size_t> counts = partition_.split(lo, lo + layout_.unit_size(g.unit));
  const size_t L = size_t(per_node_);
  // Where each rank's part starts in the unit, and where this rank's piece of node j's lies in `wire`.
  const std::vector<size_t> at = block_offsets(counts);
  const std::vector<size_t> piece = block_offsets(of_local_index(counts, per_node_, comm_.rank() % per_node_));
  Stream& compute = backend_.compute_stream();
  std::vector<std::shared_ptr<DataWork>> works;
  for (size_t j = 0; j < piece.size(); ++j) {
    const std::vector<size_t> node_counts(counts.begin() + long(j * L), counts.begin() + long((j + 1) * L));
    works.push_back(node_->all_gather(g.wire.data() + piece[j] * elem, g.raw.data() + at[j * L] * elem, node_counts,
                                      dtype_, compute));
  }
  for (const auto& w : works) w->wait(compute);
  give_back(std::move(g.wire), kWire);
  g.rail = false;
}

void PartitionedParameterCoordinator::start_gather(Gathered& g, DataComm& over, const PartitionMap& map,
                                                   const void* mine, bool quantize) {
  const size_t lo = layout_.unit_offset(g.unit), hi = lo + layout_.unit_size(g.unit);
  Stream& compute = backend_.compute_stream();
  if (!quantize) {
    g.pending = over.all_gather(mine, g.raw.data(), map.split(lo, hi), dtype_, compute);
    return;
  }
  g.split.emplace(map.split(lo, hi), 8, map.starts(lo, hi), cuts_);
  g.wire = take_buffer(g.split->bytes(), kWire);
  const int rank = over.rank();
  quantize_packet(backend_, *g.split, rank, mine, dtype_, g.wire.data());
  const unsigned char* packet = g.wire.data() + g.split->offset[size_t(rank)] * 4;
  g.pending = over.all_gather(packet, g.wire.data(), g.split->words, DType::kF32, compute);
}

std::pair<size_t, size_t> PartitionedParameterCoordinator::owned_slice(int unit) const {
  const int rank = comm_.rank();
  const size_t lo = layout_.unit_offset(unit), hi = lo + layout_.unit_size(unit);
  const size_t begin = partition_.begin(rank), end = partition_.end(rank);
  const size_t a = std::min(std::max(lo, begin), end), b = std::max(std::min(hi, end), a);
  return {a - begin, b - begin};
}

void PartitionedParameterCoordinator::complete(Gathered& g) {
  if (g.pending) {
    g.pending->wait(backend_.compute_stream());
    // A store that refills its buffer after release needs the gather to have read it.
    if (g.source && store_.reuses_buffers()) g.pending->synchronize();
  }
  g.pending.reset();
  if (g.source) store_.release(g.source);
  g.source = nullptr;
  if (g.rail) gather_in_node(g);
  if (g.split) {  // qwZ: the packets have arrived
    dequantize_packets(backend_, *g.split, g.wire.data(), g.raw.data(), dtype_);
    give_back(std::move(g.wire), kWire);
    g.split.reset();
  }
  if (g.fills_secondary) {  // hpZ: this rank's part of the unit, as every rank computes with it
    const size_t lo = layout_.unit_offset(g.unit), hi = lo + layout_.unit_size(g.unit), elem = dtype_size(dtype_);
    const size_t begin = secondary_.begin(group_->rank()), end = secondary_.end(group_->rank());
    const size_t a = std::max(lo, begin), b = std::min(hi, end);
    if (b > a) {
      backend_.copy_async(secondary_buffer_.data() + (a - begin) * elem, g.raw.data() + (a - lo) * elem,
                          (b - a) * elem, backend_.compute_stream());
    }
    g.fills_secondary = false;
  }
}

void PartitionedParameterCoordinator::drop(int unit) {
  auto it = live_.find(unit);
  if (it == live_.end()) return;
  complete(it->second);
  live_elements_ -= layout_.unit_size(unit);
  give_back(std::move(it->second.raw), kRaw);
  give_back(std::move(it->second.working), kWorking);
  live_.erase(it);
}

// Frees gathered units that are not in use, farthest next use first, until `elements` more fit
// under stage3_max_live_parameters.
void PartitionedParameterCoordinator::make_room(size_t elements, int keep_unit) {
  while (live_elements_ + elements > max_live_) {
    int victim = -1;
    size_t farthest = 0;
    for (const auto& [unit, g] : live_) {
      if (g.in_use || unit == keep_unit) continue;
      size_t d = distance_to_next_use(unit);
      if (victim < 0 || d > farthest) {
        victim = unit;
        farthest = d;
      }
    }
    ZT_CHECK(victim >= 0, "stage 3: ", live_elements_, " gathered parameters are all in use; cannot fit ", elements,
             " more under stage3_max_live_parameters ", max_live_);
    drop(victim);
  }
}

// Elements gathered between now and the next use of `unit` before the optimizer step (the
// trace covers one step; after it every copy is stale anyway). "Never" before the trace is known.
size_t PartitionedParameterCoordinator::distance_to_next_use(int unit) const {
  if (!trace_complete_) return SIZE_MAX;
  size_t distance = 0;
  for (size_t i = position_; i < trace_.size(); ++i) {
    if (trace_[i] == unit) return distance;
    distance += layout_.unit_size(trace_[i]);
  }
  return SIZE_MAX;
}

const void* PartitionedParameterCoordinator::acquire(int unit) {
  if (!trace_complete_) {
    trace_.push_back(unit);
  } else if (!trace_.empty()) {
    // Follow the trace; an unexpected unit (an eval pass, say) re-synchronises on its next
    // occurrence, searching from the start of the step when none is left.
    const size_t n = trace_.size();
    for (size_t i = 0; i < n; ++i) {
      const size_t at = (position_ + i) % n;
      if (trace_[at] == unit) {
        position_ = at + 1;
        break;
      }
    }
  }
  if (!live_.count(unit)) gather(unit);
  Gathered& g = live_[unit];
  g.in_use = true;
  complete(g);
  prefetch();
  if (dtype_ == working_dtype_) return g.raw.data();
  if (!g.converted) {
    backend_.cast_async(g.raw.data(), dtype_, g.working.data(), working_dtype_, layout_.unit_size(unit),
                        backend_.compute_stream());
    g.converted = true;
  }
  return g.working.data();
}

void PartitionedParameterCoordinator::prefetch() {
  if (!trace_complete_ || trace_.empty()) return;
  size_t ahead = 0;
  for (size_t i = position_; i < trace_.size(); ++i) {  // never past the step: those would be stale
    int u = trace_[i];
    if (live_.count(u)) continue;
    size_t n = layout_.unit_size(u);
    if (ahead + n > prefetch_limit_ || live_elements_ + n > max_live_) {
      // Not gathered yet, but the store can start reading this rank's slice from NVMe.
      const auto [a, b] = owned_slice(u);
      if (b > a) store_.prefetch(a, b);
      break;
    }
    gather(u);
    ahead += n;
  }
}

void PartitionedParameterCoordinator::release(int unit) {
  auto it = live_.find(unit);
  if (it == live_.end()) return;
  it->second.in_use = false;
  if (persistent(unit)) return;
  if (distance_to_next_use(unit) <= max_reuse_) return;
  drop(unit);
}

void PartitionedParameterCoordinator::invalidate() {
  while (!live_.empty()) drop(live_.begin()->first);
  std::fill(secondary_valid_.begin(), secondary_valid_.end(), char(0));
  if (!trace_.empty()) trace_complete_ = true;
  position_ = 0;
}

void PartitionedParameterCoordinator::end_pass(bool another) {
  std::vector<int> units;
  for (const auto& [unit, g] : live_) {
    ZT_CHECK(!g.in_use, "unit ", unit, " is still in use at the end of a forward pass");
    if (!persistent(unit)) units.push_back(unit);
  }
  for (int unit : units) drop(unit);
  if (!trace_.empty()) trace_complete_ = true;
  position_ = 0;
  if (another) prefetch();
}

}  // namespace zt
