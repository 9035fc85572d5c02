// The data path's bytes a training step sends within nodes and across nodes, for a planned run
// (zero_estimate) as the trainer measures them (metrics.jsonl's traffic_bytes): the collectives
// the engine issues at each stage, each counted as its communicator moves it (comm/traffic.h).
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <vector>

#include "comm/traffic.h"
#include "config/ds_config.h"
#include "model/param_layout.h"
#include "zero/zero_plan.h"

namespace zt {

/// The payload bytes of each kind of collective one training step hands the data communicator,
/// in steady state (from the second step on: the first records stage 3's trace, releasing every
/// unit after use and gathering it again in backward), as the engine issues them:
///   stage 0  all-reduce of the padded gradient buffer at the step (communication_data_type)
///   stage 1  reduce-scatter of it at the step, all-gather of the updated parameters (their dtype)
///   stage 2  reduce-scatter of the gradients in each micro-step's backward, all-gather at the step
///   stage 3  the same reduce-scatters, and each unit all-gathered once a step while the
///            stage3_max_live_parameters and stage3_max_reuse_distance limits let every unit stay
///            gathered from its first use to the step (DeepSpeed's defaults do); below those,
///            every use gathers (forward and backward of each micro-step): an upper bound.
///            With qwZ each unit's gather carries its quantized packets (zero/quantized_gather.h);
///            with hpZ every gather of a unit after the step's first runs in its group of hpz
///            consecutive ranks, from the secondary copy, unquantized. With qgZ across nodes each gradient
///            bucket (cut from the top of the flat buffer, as backward fills them) is
///            reduce-scattered inside each node and its int4 packets exchanged across nodes
///            (zero/quantized_reduce.h). With MiCS's hierarchical gathers across nodes, the
///            all-gathers run in the rails (1/L of each unit's bytes, shares taken equal) and in
///            the nodes (all of them).
/// Collectives within groups of `ranks` ranks each, every group alike: consecutive ranks
/// (stride 1: hpZ's groups) or every stride-th rank. `bytes` as StepPayload's, in each group.
struct GroupPayload {
  int ranks = 1, stride = 1;
  std::array<double, kCollectives> bytes{};
};
struct StepPayload {
  std::array<double, kCollectives> bytes{};  ///< over all ranks
  std::vector<GroupPayload> groups;
  /// Empty when exact; else what the figures assume (bounds, collectives left out).
  std::string caveat;
};
/// `per_node`: ranks a node (qgZ's two levels need it; 0: not known, qgZ left out);
/// `max_collective`: the transport's largest collective (the gradient buckets' size); `world`:
/// the run's ranks, where MiCS plans over fewer (plan.world, its shard group's; 0: plan.world):
/// then every collective above runs in the shard groups, and the step adds the gradient
/// partition's all-reduce across the groups.
StepPayload step_payload(const ZeroPlan& plan, const DsConfig& config, const ParamLayout& layout, int per_node = 0,
                         size_t max_collective = SIZE_MAX, int world = 0);

/// The bytes `payload` sends over the links, summed over ranks, with plan.world ranks on `nodes`
/// nodes of consecutive ranks: HierComm's two rings where `hierarchical` (ZT_SHM_COLLECTIVES=1
/// across nodes), else one ring (MPI, NCCL; shared memory on one node). Across nodes, one ring's
/// edge out of each node carries its rank's share (ranks' shares taken equal: exact within a
/// few elements a collective). A group's collectives likewise over the nodes its ranks lie on,
/// as HostComm::split builds its communicator.
TrafficTotals step_traffic(const StepPayload& payload, int world, int nodes, bool hierarchical);

/// {"intra_node": bytes, "inter_node": bytes, "by_collective": {kind: {"intra_node", "inter_node"}}}.
boost::json::object traffic_json(const TrafficTotals& t);

/// {"count": nodes, "ranks_per_node": L (0 when the nodes differ in size)}.
boost::json::object node_json(const std::vector<int>& node_of_ranks);

/// "2 nodes of 4 ranks", "1 node", "3 nodes of 1-4 ranks".
std::string node_words(const std::vector<int>& node_of_ranks);

}  // namespace zt
