#include "zero/comm_estimate.h"

#include <algorithm>

#include "core/error.h"
#include "core/dtype.h"
#include "zero/gradient_reducer.h"
#include "zero/parameter_coordinator.h"
#include "zero/partition_collectives.h"
#include "zero/quantized_gather.h"
#include "zero/quantized_reduce.h"

namespace zt {

namespace {

// Stage 3's all-gather of every unit once, cut as `map` says (the partitions, or hpZ's secondary
// copy): each unit's elements in the training dtype, or `quantized` (qwZ) its packets
// (zero/quantized_gather.h).
double unit_gathers(const ZeroPlan& plan, bool quantized, const ParamLayout& layout, const PartitionMap& map) {
  const std::vector<size_t> cuts = tensor_starts(layout.tensor_ranges());
  double bytes = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t lo = layout.unit_offset(u), hi = lo + layout.unit_size(u);
    bytes += quantized ? double(QuantizedSplit(map.split(lo, hi), 8, map.starts(lo, hi), cuts).bytes())
                       : double((hi - lo) * plan.elem());
  }
  return bytes;
}

// The closed forms of a collective's bytes `bytes` over p ranks on N nodes (step_traffic).
void add_traffic(TrafficTotals& t, Collective kind, double bytes, double p, double N, bool hierarchical,
                 double copies) {
  const double L = p / N;
  // Bytes every rank hands over, sent in all: (p - 1) / p of a reduce-scatter's or all-gather's
  // buffer a rank, twice that for an all-reduce, a broadcast's buffer by all but one rank, an
  // all-to-all's blocks but a rank's own.
  const double total = (kind == Collective::kAllReduce ? 2 : 1) * (p - 1) * bytes;
  double inter = 0;
  if (N > 1) {
    if (kind == Collective::kAllToAll) {
      inter = total * (p - L) / (p - 1);  // straight to each rank: p - L of the p - 1 live elsewhere
    } else if (hierarchical && kind != Collective::kBroadcast) {
      inter = total / (p - 1) * (N - 1);  // a ring of N for each local index, over 1/L of it
    } else {
      inter = total * N / p;  // the N ring edges (of p) that leave a node; a broadcast from each rank alike
    }
  }
  t.intra_node[size_t(kind)] += copies * (total - inter);
  t.inter_node[size_t(kind)] += copies * inter;
}

}  // namespace

StepPayload step_payload(const ZeroPlan& plan, const DsConfig& config, const ParamLayout& layout, int per_node,
                         size_t max_collective, int world) {
  StepPayload out;
  if (world > plan.world) {  // MiCS: the shard groups' collectives, and the replicas' all-reduce
    StepPayload shard = step_payload(plan, config, layout, per_node, max_collective);
    out.groups.push_back(GroupPayload{plan.world, 1, shard.bytes});
    // Groups inside a shard group (its ranks are consecutive, so their strides hold in the world).
    out.groups.insert(out.groups.end(), shard.groups.begin(), shard.groups.end());
    GroupPayload replicas{world / plan.world, plan.world, {}};
    replicas.bytes[size_t(Collective::kAllReduce)] = double(plan.grads_count * plan.grad_elem());
    out.groups.push_back(replicas);
    out.caveat = shard.caveat;
    return out;
  }
  const size_t flat_size = layout.flat_size();
  if (plan.world <= 1) return out;
  const double padded = double(plan.partition.padded_size), flat = double(flat_size);
  const double reduce = double(dtype_size(plan.comm_dtype)), gather = double(plan.elem());
  const double micro_steps = double(config.gradient_accumulation_steps);
  const ZeroConfig& z = config.zero;
  auto& b = out.bytes;
  // The gradients: stage 0 keeps the whole sum; the others their partition, which
  // reduce_scatter: false cuts out of an all-reduce (GradientReducer::policy).
  const Collective reduction =
      plan.stage >= 1 && z.reduce_scatter ? Collective::kReduceScatter : Collective::kAllReduce;
  // Stages 1-2 share the updated partitions: an all-gather, or with allgather_partitions: false a
  // broadcast from each rank (ZeroEngine::share_parameters).
  const Collective share = z.allgather_partitions ? Collective::kAllGather : Collective::kBroadcast;
  switch (plan.stage) {
    case 0: b[size_t(reduction)] = padded * reduce; break;  // at the step
    case 1:
      b[size_t(reduction)] = padded * reduce;
      b[size_t(share)] += padded * gather;
      break;
    case 2:
      b[size_t(reduction)] = flat * reduce * micro_steps;  // in each micro-step's backward
      b[size_t(share)] += padded * gather;
      break;
    default: {
      const int qgz =
          per_node > 0 ? GradientReducer::qgz_ranks_per_node(plan, z, block_nodes(plan.world, per_node)) : 0;
      if (qgz > 0) {  // a reduce-scatter in each node, then int4 packets across the nodes
        GroupPayload node{qgz, 1, {}}, across{plan.world / qgz, qgz, {}};
        node.bytes[size_t(Collective::kReduceScatter)] = flat * reduce * micro_steps;
        const size_t capacity = collective_chunk(plan.partition, max_collective, z.reduce_bucket_size);
        double packets = 0;
        for (size_t hi = flat_size; hi > 0; hi -= std::min(hi, capacity)) {
          packets += double(QuantizedReduceScatter::exchange_bytes(plan.partition, hi - std::min(hi, capacity), hi,
                                                                   tensor_starts(layout.tensor_ranges())));
        }
        // Each local index's group sends its ranks' packets; the groups differ a little: their mean.
        across.bytes[size_t(Collective::kAllToAll)] = packets / qgz * micro_steps;
        out.groups.push_back(node);
        out.groups.push_back(across);
      } else {
        b[size_t(reduction)] = flat * reduce * micro_steps;
      }
      // Units stay gathered through the step when all of them fit under the live limit and no
      // unit's next use (backward's, or the next micro-step's forward) is farther than the reuse
      // distance: at most the whole trace, forward and backward.
      const bool stay = double(z.stage3_max_live_parameters) >= flat &&
                        double(z.stage3_max_reuse_distance) >= 2 * flat;
      const double gathers = stay ? 1.0 : 2.0 * micro_steps;
      const int hierarchical = per_node > 0 ? PartitionedParameterCoordinator::hierarchical_per_node(
                                                  z, block_nodes(plan.world, per_node))
                                            : 0;
      if (hierarchical > 0) {  // MiCS's two levels: each rail carries its ranks' slices, each node all
        GroupPayload rail{plan.world / hierarchical, hierarchical, {}}, node{hierarchical, 1, {}};
        const double all = unit_gathers(plan, false, layout, plan.partition) * gathers;
        rail.bytes[size_t(Collective::kAllGather)] = all / hierarchical;
        node.bytes[size_t(Collective::kAllGather)] = all;
        out.groups.push_back(rail);
        out.groups.push_back(node);
      } else {
        b[size_t(Collective::kAllGather)] =
            unit_gathers(plan, z.zero_quantized_weights, layout, plan.partition) * (plan.hpz > 1 ? 1 : gathers);
      }
      if (plan.hpz > 1 && gathers > 1) {  // hpZ: the step's first gather of a unit fills the secondary
        GroupPayload g{plan.hpz, 1, {}};
        // Unquantized: the secondary's values are the first gather's (PartitionedParameterCoordinator).
        g.bytes[size_t(Collective::kAllGather)] = unit_gathers(plan, false, layout, plan.secondary) * (gathers - 1);
        out.groups.push_back(g);
      }
      if (!stay) {
        out.caveat = "stage3_max_live_parameters or stage3_max_reuse_distance below the model: all-gathers counted "
                     "as if every use gathered (an upper bound)";
      }
    }
  }
  using T = OptimizerConfig::Type;
  const T type = config.optimizer.type;
  const auto add = [&](const std::string& what) { out.caveat += cat(out.caveat.empty() ? "" : "; ", what); };
  if (type == T::kMuon || type == T::kAdafactor) {
    add(cat("the optimizer's own collectives (", optimizer_name(type), ") are not counted"));
  } else if (type == T::kOneBitAdam || type == T::kZeroOneAdam || type == T::kOneBitLamb) {
    add(cat("figures for the warm-up: past it ", optimizer_name(type),
            " reduces compressed momenta instead of the gradients (not counted)"));
  }
  if (config.fp16.enabled) add("a step skipped for an fp16 overflow shares no parameters");
  return out;
}

TrafficTotals step_traffic(const StepPayload& payload, int world, int nodes, bool hierarchical) {
  TrafficTotals t;
  for (int k = 0; k < kCollectives; ++k) {
    add_traffic(t, Collective(k), payload.bytes[size_t(k)], world, nodes, hierarchical, 1);
  }
  const int per_node = world / nodes;
  for (const GroupPayload& g : payload.groups) {
    // The first group's ranks (the others lie alike) and their nodes: HostComm::split's choice
    // (HierComm for several ranks on each of several nodes, else one ring over those nodes).
    std::vector<int> node_of;
    for (int i = 0; i < g.ranks; ++i) node_of.push_back(i * g.stride / per_node);
    const NodeCounts c = count_nodes(node_of);
    const bool group_hierarchical = hierarchical && c.nodes > 1 && c.most > 1;
    for (int k = 0; k < kCollectives; ++k) {
      add_traffic(t, Collective(k), g.bytes[size_t(k)], g.ranks, double(c.nodes), group_hierarchical,
                  double(world / g.ranks));
    }
  }
  return t;
}

boost::json::object traffic_json(const TrafficTotals& t) {
  boost::json::object by;
  for (int k = 0; k < kCollectives; ++k) {
    by[collective_name(Collective(k))] = {{"intra_node", t.intra_node[size_t(k)]},
                                          {"inter_node", t.inter_node[size_t(k)]}};
  }
  return {{"intra_node", t.intra()}, {"inter_node", t.inter()}, {"by_collective", std::move(by)}};
}

boost::json::object node_json(const std::vector<int>& node_of_ranks) {
  const NodeCounts c = count_nodes(node_of_ranks);
  return {{"count", c.nodes}, {"ranks_per_node", c.fewest == c.most ? c.most : 0}};
}

std::string node_words(const std::vector<int>& node_of_ranks) {
  const NodeCounts c = count_nodes(node_of_ranks);
  if (c.nodes <= 1) return "1 node";
  return cat(c.nodes, " nodes of ", c.fewest == c.most ? std::to_string(c.most) : cat(c.fewest, "-", c.most),
             c.most == 1 ? " rank" : " ranks");
}

}  // namespace zt
