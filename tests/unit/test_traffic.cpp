// comm/traffic.h: the bytes a rank sends and receives in a collective, within its node and
// across nodes, against cases worked by hand and the totals every ring must keep.
#include "comm/traffic.h"

#include <gtest/gtest.h>

#include <numeric>

namespace zt {
namespace {

Traffic sum_over_ranks(const CollectiveShape& c, int size, const std::vector<int>& nodes) {
  Traffic all;
  for (int r = 0; r < size; ++r) all += ring_traffic(c, r, nodes);
  return all;
}

Traffic hier_sum(const CollectiveShape& c, int per_node, int nodes) {
  Traffic all;
  for (int r = 0; r < per_node * nodes; ++r) all += hier_traffic(c, r, per_node, nodes);
  return all;
}

// Rank 1 of 4 on one node, a reduce-scatter of counts {3, 1, 2, 2} in 2-byte elements: it sends
// every block but its own (8 - 1 elements) and receives every block but rank 0's (8 - 3).
TEST(Traffic, RingReduceScatterByHand) {
  const Traffic t = ring_traffic({Collective::kReduceScatter, {3, 1, 2, 2}, 2}, 1, {0, 0, 0, 0});
  EXPECT_EQ(t.intra_node.sent, 14u);
  EXPECT_EQ(t.intra_node.received, 10u);
  EXPECT_EQ(t.inter_node.sent + t.inter_node.received, 0u);
}

// Two nodes of two: rank 1's edge to rank 2 leaves its node, its edge from rank 0 does not; rank
// 0 receives from rank 3, on the other node. An all-gather of 4 elements a rank.
TEST(Traffic, RingEdgesThatLeaveANode) {
  const std::vector<int> nodes{0, 0, 1, 1};
  const CollectiveShape ag{Collective::kAllGather, {4, 4, 4, 4}, 1};
  const Traffic one = ring_traffic(ag, 1, nodes), zero = ring_traffic(ag, 0, nodes);
  EXPECT_EQ(one.inter_node.sent, 12u);
  EXPECT_EQ(one.intra_node.received, 12u);
  EXPECT_EQ(one.intra_node.sent + one.inter_node.received, 0u);
  EXPECT_EQ(zero.intra_node.sent, 12u);
  EXPECT_EQ(zero.inter_node.received, 12u);
}

// Summed over the ranks, what is sent is received, and a ring of p ranks moves (p - 1) times the
// payload of a reduce-scatter or an all-gather, 2 (p - 1) times an all-reduce's, whatever the
// blocks and however the ranks sit on nodes.
TEST(Traffic, RingTotals) {
  const std::vector<size_t> counts{5, 0, 7, 3, 1, 9};
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0)), p = counts.size();
  for (const auto& nodes : std::vector<std::vector<int>>{{0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 2, 2}, {4, 4, 4, 9, 9, 9}}) {
    for (Collective kind : {Collective::kReduceScatter, Collective::kAllGather, Collective::kAllReduce}) {
      const CollectiveShape c{kind, kind == Collective::kAllReduce ? std::vector<size_t>{total} : counts, 4};
      const Traffic all = sum_over_ranks(c, int(p), nodes);
      const uint64_t sent = all.intra_node.sent + all.inter_node.sent;
      EXPECT_EQ(sent, all.intra_node.received + all.inter_node.received) << collective_name(kind);
      EXPECT_EQ(all.inter_node.sent, all.inter_node.received) << collective_name(kind);
      EXPECT_EQ(sent, (kind == Collective::kAllReduce ? 2 : 1) * (p - 1) * total * 4) << collective_name(kind);
    }
  }
}

// The chain from root 2 of 4 ranks: rank 1 (whose next is the root) sends nothing, the root
// receives nothing. All-to-all: a block to each other rank, across nodes where it lives there.
TEST(Traffic, BroadcastAndAllToAll) {
  const std::vector<int> nodes{0, 0, 1, 1};
  const CollectiveShape bc{Collective::kBroadcast, {3}, 1, 2};
  EXPECT_EQ(ring_traffic(bc, 1, nodes).inter_node.sent, 0u);
  EXPECT_EQ(ring_traffic(bc, 1, nodes).intra_node.received, 3u);
  EXPECT_EQ(ring_traffic(bc, 2, nodes).intra_node.received + ring_traffic(bc, 2, nodes).inter_node.received, 0u);
  EXPECT_EQ(ring_traffic(bc, 3, nodes).inter_node.sent, 3u);  // 3 -> 0 leaves node 1
  const Traffic a2a = ring_traffic({Collective::kAllToAll, {5}, 2}, 0, nodes);
  EXPECT_EQ(a2a.intra_node.sent, 10u);
  EXPECT_EQ(a2a.inter_node.sent, 20u);
  EXPECT_EQ(a2a.inter_node.received, 20u);
  const Traffic alone = ring_traffic({Collective::kAllReduce, {100}, 4}, 0, {0});
  EXPECT_EQ(alone.intra_node.sent + alone.inter_node.sent, 0u);
}

// HierComm with 2 nodes of 2, an all-reduce of 10 fp32: each node reduce-scatters slices {5, 5}
// (5 elements sent a rank) and all-gathers them (5 more); each slice is all-reduced between the
// nodes in blocks {3, 2}: (5 - 3) + (5 - 2) = 5 elements sent by either node's rank.
TEST(Traffic, HierarchicalByHand) {
  const CollectiveShape ar{Collective::kAllReduce, {10}, 4};
  for (int r = 0; r < 4; ++r) {
    const Traffic t = hier_traffic(ar, r, 2, 2);
    EXPECT_EQ(t.intra_node.sent, 40u) << "rank " << r;
    EXPECT_EQ(t.inter_node.sent, 20u) << "rank " << r;
  }
}

// Summed over ranks, N nodes of L: a reduce-scatter or all-gather of T bytes moves N (L - 1) T
// inside the nodes and (N - 1) T between them, an all-reduce twice each: only 1/L of the data
// crosses a node's links, where a flat ring's edge out of each node carries about all of it.
TEST(Traffic, HierarchicalTotals) {
  const int L = 3, N = 2;
  const std::vector<size_t> counts{4, 0, 6, 2, 8, 1};
  const uint64_t T = 21 * 2;
  for (Collective kind : {Collective::kReduceScatter, Collective::kAllGather, Collective::kAllReduce}) {
    const int twice = kind == Collective::kAllReduce ? 2 : 1;
    const CollectiveShape c{kind, kind == Collective::kAllReduce ? std::vector<size_t>{21} : counts, 2};
    const Traffic all = hier_sum(c, L, N);
    EXPECT_EQ(all.intra_node.sent, uint64_t(twice * N * (L - 1)) * T) << collective_name(kind);
    EXPECT_EQ(all.inter_node.sent, uint64_t(twice * (N - 1)) * T) << collective_name(kind);
    EXPECT_EQ(all.intra_node.received, all.intra_node.sent) << collective_name(kind);
    EXPECT_EQ(all.inter_node.received, all.inter_node.sent) << collective_name(kind);
    const Traffic flat = sum_over_ranks(c, L * N, block_nodes(L * N, L));
    EXPECT_GT(flat.inter_node.sent, all.inter_node.sent) << collective_name(kind);
  }
}

}  // namespace
}  // namespace zt
