#include "comm/traffic.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/human_units.h"

namespace zt {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

Traffic& Traffic::operator+=(const Traffic& o) {
  intra_node.sent += o.intra_node.sent;
  intra_node.received += o.intra_node.received;
  inter_node.sent += o.inter_node.sent;
  inter_node.received += o.inter_node.received;
  return *this;
}

std::vector<int> block_nodes(int size, int per_node) {
  std::vector<int> nodes(static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) nodes[size_t(q)] = q / per_node;
  return nodes;
}

NodeCounts count_nodes(const std::vector<int>& node_of) {
  std::map<int, int> sizes;  // ranks on each node, by label
  for (int n : node_of) ++sizes[n];
  NodeCounts c{sizes.size(), INT32_MAX, 0};
  for (const auto& [node, n] : sizes) c.fewest = std::min(c.fewest, n), c.most = std::max(c.most, n);
  return c;
}

namespace {

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t(0)); }

}  // namespace

std::vector<size_t> even_blocks(size_t count, size_t parts) {
  std::vector<size_t> blocks(parts, count / parts);
  for (size_t i = 0; i < count % parts; ++i) ++blocks[i];
  return blocks;
}

std::vector<size_t> across_counts(const std::vector<size_t>& counts, int per_node, int local) {
  const size_t nodes = counts.size() / size_t(per_node);
  std::vector<size_t> out(nodes);
  for (size_t n = 0; n < nodes; ++n) out[n] = counts[n * size_t(per_node) + size_t(local)];
  return out;
}

std::vector<size_t> group_counts(const std::vector<size_t>& counts, int per_node) {
  std::vector<size_t> group(static_cast<size_t>(per_node));
  for (int l = 0; l < per_node; ++l) group[size_t(l)] = sum(across_counts(counts, per_node, l));
  return group;
}

Traffic ring_traffic(const CollectiveShape& c, int rank, const std::vector<int>& node_of) {
  const size_t p = node_of.size(), r = size_t(rank);
  Traffic t;
  if (p <= 1) return t;
  ZT_CHECK(r < p, "ring_traffic: rank ", rank, " of ", p);
  const size_t next = (r + 1) % p, prev = (r + p - 1) % p;
  // What r sends goes to next over one link, what it receives comes from prev over another.
  LinkBytes& out = node_of[r] != node_of[next] ? t.inter_node : t.intra_node;
  LinkBytes& in = node_of[prev] != node_of[r] ? t.inter_node : t.intra_node;
  size_t sent = 0, received = 0;  // elements
  switch (c.kind) {
    case Collective::kReduceScatter: {  // step k sends the partial sums of block r - k
      ZT_CHECK(c.counts.size() == p, "ring_traffic: ", c.counts.size(), " counts for ", p, " ranks");
      const size_t total = sum(c.counts);
      sent = total - c.counts[r], received = total - c.counts[prev];
      break;
    }
    case Collective::kAllGather: {  // step k forwards block r - k
      ZT_CHECK(c.counts.size() == p, "ring_traffic: ", c.counts.size(), " counts for ", p, " ranks");
      const size_t total = sum(c.counts);
      sent = total - c.counts[next], received = total - c.counts[r];
      break;
    }
    case Collective::kAllReduce: {  // a reduce-scatter, then an all-gather, of p blocks
      const size_t count = c.counts.at(0);
      const std::vector<size_t> b = even_blocks(count, p);
      sent = (count - b[r]) + (count - b[next]);
      received = (count - b[prev]) + (count - b[r]);
      break;
    }
    case Collective::kBroadcast: {  // a chain from the root: root -> root + 1 -> ... -> root - 1
      const size_t count = c.counts.at(0), root = size_t(c.root);
      sent = next != root ? count : 0;
      received = r != root ? count : 0;
      break;
    }
    case Collective::kAllToAll: {  // each block straight to its rank
      const bool v = !c.recv_counts.empty();  // all_to_all_v: a count per rank each way
      for (size_t q = 0; q < p; ++q) {
        if (q == r) continue;
        LinkBytes& link = node_of[q] != node_of[r] ? t.inter_node : t.intra_node;
        link.sent += uint64_t(v ? c.counts.at(q) : c.counts.at(0)) * c.elem;
        link.received += uint64_t(v ? c.recv_counts.at(q) : c.counts.at(0)) * c.elem;
      }
      return t;
    }
  }
  out.sent += uint64_t(sent) * c.elem;
  in.received += uint64_t(received) * c.elem;
  return t;
}

Traffic hier_traffic(const CollectiveShape& c, int rank, int per_node, int nodes) {
  const int local = rank % per_node, node = rank / per_node;
  const std::vector<int> one_node(static_cast<size_t>(per_node), 0), one_each = block_nodes(nodes, 1);
  Traffic t;
  switch (c.kind) {
    case Collective::kReduceScatter:
    case Collective::kAllGather: {
      ZT_CHECK(c.counts.size() == size_t(per_node) * size_t(nodes), "hier_traffic: ", c.counts.size(),
               " counts for ", per_node * nodes, " ranks");
      t += ring_traffic({c.kind, group_counts(c.counts, per_node), c.elem}, local, one_node);
      t += ring_traffic({c.kind, across_counts(c.counts, per_node, local), c.elem}, node, one_each);
      return t;
    }
    case Collective::kAllReduce: {  // reduce-scatter in the node, all-reduce over nodes, all-gather
      const std::vector<size_t> slices = even_blocks(c.counts.at(0), size_t(per_node));
      t += ring_traffic({Collective::kReduceScatter, slices, c.elem}, local, one_node);
      t += ring_traffic({Collective::kAllReduce, {slices[size_t(local)]}, c.elem}, node, one_each);
      t += ring_traffic({Collective::kAllGather, slices, c.elem}, local, one_node);
      return t;
    }
    case Collective::kBroadcast:
    case Collective::kAllToAll: return ring_traffic(c, rank, block_nodes(per_node * nodes, per_node));
  }
  return t;
}

double TrafficTotals::intra() const { return std::accumulate(intra_node.begin(), intra_node.end(), 0.0); }
double TrafficTotals::inter() const { return std::accumulate(inter_node.begin(), inter_node.end(), 0.0); }

std::vector<double> TrafficTotals::values() const {
  std::vector<double> v(intra_node.begin(), intra_node.end());
  v.insert(v.end(), inter_node.begin(), inter_node.end());
  return v;
}

TrafficTotals TrafficTotals::from_values(const double* v) {
  TrafficTotals t;
  std::copy(v, v + kCollectives, t.intra_node.begin());
  std::copy(v + kCollectives, v + 2 * kCollectives, t.inter_node.begin());
  return t;
}

TrafficTotals& TrafficTotals::operator+=(const TrafficTotals& o) {
  for (int k = 0; k < kCollectives; ++k) {
    intra_node[size_t(k)] += o.intra_node[size_t(k)];
    inter_node[size_t(k)] += o.inter_node[size_t(k)];
  }
  return *this;
}

TrafficTotals sent_bytes(const TrafficByKind& t) {
  TrafficTotals out;
  for (int k = 0; k < kCollectives; ++k) {
    out.intra_node[size_t(k)] = double(t[size_t(k)].intra_node.sent);
    out.inter_node[size_t(k)] = double(t[size_t(k)].inter_node.sent);
  }
  return out;
}

std::string traffic_words(const TrafficTotals& t) {
  std::string out = cat(human_bytes(t.intra()), " within nodes, ", human_bytes(t.inter()), " across nodes");
  std::vector<int> kinds;
  for (int k = 0; k < kCollectives; ++k) {
    if (t.inter_node[size_t(k)] > 0) kinds.push_back(k);
  }
  std::sort(kinds.begin(), kinds.end(),
            [&](int a, int b) { return t.inter_node[size_t(a)] > t.inter_node[size_t(b)]; });
  for (size_t i = 0; i < kinds.size(); ++i) {
    out += cat(i == 0 ? " (" : ", ", collective_name(Collective(kinds[i])), " ",
               human_bytes(t.inter_node[size_t(kinds[i])]), i + 1 == kinds.size() ? ")" : "");
  }
  return out;
}

int block_ranks_per_node(const std::vector<int>& node_of) {
  const NodeCounts c = count_nodes(node_of);
  if (c.nodes <= 1 || c.fewest != c.most) return 0;
  const int per_node = c.most;
  for (size_t r = 0; r < node_of.size(); ++r) {
    if (node_of[r] != node_of[r / size_t(per_node) * size_t(per_node)]) return 0;
  }
  return per_node;
}

std::vector<size_t> of_local_index(const std::vector<size_t>& per_rank, int per_node, int local) {
  std::vector<size_t> out;
  for (size_t r = size_t(local); r < per_rank.size(); r += size_t(per_node)) out.push_back(per_rank[r]);
  return out;
}

}  // namespace zt
