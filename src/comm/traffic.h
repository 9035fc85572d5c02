// The bytes a collective moves between ranks, within a node and across nodes: what each rank
// sends and receives. A model, the bandwidth-optimal one NCCL's rings follow (and nccl-tests'
// and DeepSpeed's "bus bytes"): a flat communicator (MPI, NCCL, shared memory) as a ring over
// its ranks (rank r sends to r + 1): a reduce-scatter or an all-gather of T bytes sends
// (p - 1) / p of T a rank, an all-reduce twice that, a broadcast the whole buffer along the
// chain from the root, an all-to-all each block straight to its rank. So a ring edge from a
// node's last rank to the next node's first carries that rank's share across nodes, and every
// other edge stays inside a node. HierComm's levels (a ring in each node, a ring over the nodes
// for each local index) are two such rings (hier_traffic). Open MPI's non-blocking
// reduce-scatter and all-gather (libnbc: a reduce to rank 0 then a scatter, a linear exchange)
// move more than the ring does, and which links they use is its choice; the model counts what
// the collective must move at best, the same way for every transport, so that a run's figures
// and zero_estimate's compare. Summed over ranks, sent equals received.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };
inline constexpr int kCollectives = 5;

/// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all".
const char* collective_name(Collective c);

struct LinkBytes {
  uint64_t sent = 0, received = 0;
};

/// One rank's bytes over the links inside its node and between nodes.
struct Traffic {
  LinkBytes intra_node, inter_node;
  Traffic& operator+=(const Traffic& o);
};

/// A collective as a communicator is handed it: for reduce-scatter and all-gather one count of
/// elements a rank; for all-reduce and broadcast the buffer's count; for all-to-all the count of
/// each rank's block, or for all_to_all_v one count a rank sent to it and `recv_counts` one a
/// rank received from it. `root`: broadcast's.
struct CollectiveShape {
  Collective kind;
  std::vector<size_t> counts;
  size_t elem = 1;  ///< bytes an element
  int root = 0;
  std::vector<size_t> recv_counts{};  ///< all_to_all_v's
};

/// This rank's traffic in the ring over the ranks of a communicator whose rank q lies on node
/// node_of[q] (any labels; a rank's neighbours are q - 1 and q + 1, cyclically).
Traffic ring_traffic(const CollectiveShape& c, int rank, const std::vector<int>& node_of);

/// The same in HierComm's scheme (comm/hier_comm.h): `nodes` nodes of `per_node` consecutive
/// ranks; reduce-scatter, all-gather and all-reduce in the node (shared memory) and over the
/// nodes (one rank of each), broadcast and all-to-all flat over all ranks.
Traffic hier_traffic(const CollectiveShape& c, int rank, int per_node, int nodes);

/// node_of for `size` ranks in nodes of `per_node` consecutive ranks.
std::vector<int> block_nodes(int size, int per_node);

/// How many nodes node_of names, and the fewest and most ranks on one.
struct NodeCounts {
  size_t nodes = 0;
  int fewest = 0, most = 0;
};
NodeCounts count_nodes(const std::vector<int>& node_of);

/// L, where node_of names more than one node, each of L consecutive ranks (block_nodes' layout:
/// the two-level schemes of qgZ and MiCS's hierarchical gathers); else 0 (one node, nodes of
/// different sizes, or interleaved ranks).
int block_ranks_per_node(const std::vector<int>& node_of);
/// Of one value a rank in such nodes of `per_node` ranks, those of the ranks with local index
/// `local` (ranks local, per_node + local, ...), in node order.
std::vector<size_t> of_local_index(const std::vector<size_t>& per_rank, int per_node, int local);

// HierComm's split of a collective (comm/hier_comm.h), which hier_traffic counts.
/// `count` elements in `parts` near-equal blocks, the first count % parts one longer: an
/// all-reduce's slices, one a local index (and the ring's blocks).
std::vector<size_t> even_blocks(size_t count, size_t parts);
/// Of one count a rank (nodes of `per_node` consecutive ranks), those of the ranks with local
/// index `local`, one a node in node order: the across-node collective's counts.
std::vector<size_t> across_counts(const std::vector<size_t>& counts, int per_node, int local);
/// Each local index's blocks together (the ranks l, L + l, 2L + l, ...): the in-node counts.
std::vector<size_t> group_counts(const std::vector<size_t>& counts, int per_node);

/// What a data communicator has moved, per kind of collective, on this rank.
using TrafficByKind = std::array<Traffic, kCollectives>;

/// Bytes sent over the links within nodes and across nodes, by kind of collective: one rank's,
/// or summed over ranks (what crossed each kind of link; summed over ranks, sent = received).
struct TrafficTotals {
  std::array<double, kCollectives> intra_node{}, inter_node{};
  double intra() const;
  double inter() const;
  /// The 2 x kCollectives values, for a reduction over ranks, and back.
  std::vector<double> values() const;
  static TrafficTotals from_values(const double* v);
  TrafficTotals& operator+=(const TrafficTotals& o);
};

/// This rank's sent bytes.
TrafficTotals sent_bytes(const TrafficByKind& t);

/// "1.2 GB within nodes, 340 MB across nodes (all_gather 226 MB, reduce_scatter 113 MB)": the
/// kinds that crossed nodes, largest first.
std::string traffic_words(const TrafficTotals& t);

}  // namespace zt
