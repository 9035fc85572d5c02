#include "zero/comm_estimate.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/dtype.h"

namespace zt {

StepPayload step_payload(const ZeroPlan& plan, const DsConfig& config, size_t flat_size) {
  StepPayload out;
  if (plan.world <= 1) return out;
  const double padded = double(plan.partition.padded_size), flat = double(flat_size);
  const double reduce = double(dtype_size(plan.comm_dtype)), gather = double(plan.elem());
  const double micro_steps = double(config.gradient_accumulation_steps);
  auto& b = out.bytes;
  const ZeroConfig& z = config.zero;
  switch (plan.stage) {
    case 0: b[size_t(Collective::kAllReduce)] = padded * reduce; break;
    case 1:
      b[size_t(Collective::kReduceScatter)] = padded * reduce;
      b[size_t(Collective::kAllGather)] = padded * gather;
      break;
    case 2:
      b[size_t(Collective::kReduceScatter)] = flat * reduce * micro_steps;
      b[size_t(Collective::kAllGather)] = padded * gather;
      break;
    default: {
      b[size_t(Collective::kReduceScatter)] = flat * reduce * micro_steps;
      // Units stay gathered through the step when all of them fit under the live limit and no
      // unit's next use (backward's, or the next micro-step's forward) is farther than the reuse
      // distance: at most the whole trace, forward and backward.
      const bool stay = double(z.stage3_max_live_parameters) >= flat &&
                        double(z.stage3_max_reuse_distance) >= 2 * flat;
      b[size_t(Collective::kAllGather)] = flat * gather * (stay ? 1.0 : 2.0 * micro_steps);
      if (!stay) {
        out.caveat = "stage3_max_live_parameters or stage3_max_reuse_distance below the model: all-gathers counted "
                     "as if every use gathered (an upper bound)";
      }
    }
  }
  using T = OptimizerConfig::Type;
  const T type = config.optimizer.type;
  if (type == T::kMuon || type == T::kAdafactor || type == T::kOneBitAdam || type == T::kZeroOneAdam ||
      type == T::kOneBitLamb) {
    out.caveat += cat(out.caveat.empty() ? "" : "; ", "the optimizer's own collectives (",
                      optimizer_name(type), ") are not counted");
  }
  return out;
}

TrafficTotals step_traffic(const StepPayload& payload, int world, int nodes, bool hierarchical) {
  TrafficTotals t;
  const double p = world, N = nodes, L = p / N;
  for (int k = 0; k < kCollectives; ++k) {
    const double bytes = payload.bytes[size_t(k)];
    // Ring passes a byte makes: reduce-scatter and all-gather once, all-reduce twice.
    const double passes = Collective(k) == Collective::kAllReduce ? 2 : 1;
    double intra = 0, inter = 0;
    if (hierarchical && nodes > 1) {
      intra = passes * N * (L - 1) * bytes;  // a ring of L in each node
      inter = passes * (N - 1) * bytes;      // a ring of N for each local index, over 1/L of it
    } else {
      const double total = passes * (p - 1) * bytes;  // every rank sends (p - 1) / p of it
      inter = nodes > 1 ? N * total / p : 0;          // the N edges that leave a node
      intra = total - inter;
    }
    t.intra_node[size_t(k)] = intra;
    t.inter_node[size_t(k)] = inter;
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

namespace {

// Ranks on each node, by node label.
std::map<int, int> node_sizes(const std::vector<int>& node_of_ranks) {
  std::map<int, int> sizes;
  for (int n : node_of_ranks) ++sizes[n];
  return sizes;
}

}  // namespace

boost::json::object node_json(const std::vector<int>& node_of_ranks) {
  const std::map<int, int> sizes = node_sizes(node_of_ranks);
  int lo = INT32_MAX, hi = 0;
  for (const auto& [node, n] : sizes) lo = std::min(lo, n), hi = std::max(hi, n);
  return {{"count", sizes.size()}, {"ranks_per_node", lo == hi ? hi : 0}};
}

std::string node_words(const std::vector<int>& node_of_ranks) {
  const std::map<int, int> sizes = node_sizes(node_of_ranks);
  if (sizes.size() <= 1) return "1 node";
  int lo = INT32_MAX, hi = 0;
  for (const auto& [node, n] : sizes) lo = std::min(lo, n), hi = std::max(hi, n);
  return cat(sizes.size(), " nodes of ", lo == hi ? std::to_string(lo) : cat(lo, "-", hi),
             lo == 1 && hi == 1 ? " rank" : " ranks");
}

}  // namespace zt
