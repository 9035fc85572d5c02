// HierComm: the HostComm for ranks on several nodes, two levels deep: shared memory inside a node
// (ShmComm over the node's ranks) and MPI between nodes (MpiComm over the ranks that have the same
// local index, one per node), as NCCL's and DeepSpeed's hierarchical collectives do. With L ranks
// per node and N nodes, rank n * L + l is local rank l of node n:
//   reduce-scatter  the blocks are regrouped by their destination's local index (one copy), the
//                   node reduce-scatters the groups (local rank l gets its node's sums of the
//                   blocks of ranks l, L + l, 2L + l, ...), and each local index reduce-scatters
//                   those across the nodes: each rank ends with its own block, summed over all.
//   all-gather      the reverse: across the nodes first (local rank l gathers the blocks of ranks
//                   l, L + l, ...), then inside the node, and one copy back into rank order.
//   all-reduce      reduce-scatter inside the node, all-reduce of each slice across the nodes,
//                   all-gather inside the node.
// So only 1/L of the data crosses the network per rank, and MPI sees N ranks, not N * L.
// Broadcast, barrier and the scalar helpers go through one MpiComm over all ranks (control traffic).
//
// Sums are the node's in rank order, then MPI's over the nodes: deterministic from run to run;
// with two nodes exactly ((x_0 + ... + x_{L-1}) + (x_L + ... + x_{2L-1})) in any dtype (16-bit sums
// round after every addition, as MpiComm's).
//
// It needs nodes of equal size whose ranks are consecutive (mpirun's and srun's default block
// placement); node_layout() says whether a communicator is laid out so.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"
#include "comm/shm_comm.h"
#include "comm/work_queue.h"

namespace zt {

class HierComm final : public HostComm {
 public:
  /// `parent`'s ranks in nodes of `ranks_per_node` consecutive ranks (which must divide its size;
  /// the ranks of a node must share memory). Collective.
  HierComm(MPI_Comm parent, int ranks_per_node, size_t chunk_bytes = kShmChunkBytes);
  ~HierComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shm+mpi"; }
  size_t max_collective_elements() const override { return kMpiMaxCollectiveElements; }

  std::shared_ptr<Work> all_reduce(void* buffer, size_t count, DType dtype) override;
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                       DType dtype) override;
  std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                   DType dtype) override;
  std::shared_ptr<Work> broadcast(void* buffer, size_t count, DType dtype, int root) override;
  /// Through MPI over all ranks: every block has its own destination, so no level saves traffic.
  std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  std::shared_ptr<Work> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                     const std::vector<size_t>& recv_counts, DType dtype) override;
  std::shared_ptr<Work> barrier() override;
  std::unique_ptr<HostComm> duplicate() override;
  /// Over these nodes: a group inside one node shares memory (ShmComm), one of several ranks on
  /// each of several nodes is a HierComm of its own, any other an MpiComm over the same nodes.
  std::unique_ptr<HostComm> split(int color) override;
  void all_reduce_doubles(std::vector<double>& values, bool max) override;
  /// Two rings a collective (comm/traffic.h: hier_traffic), over these nodes (simulated ones
  /// under ZT_SHM_NODE_SIZE).
  Traffic traffic(const CollectiveShape& shape) const override { return hier_traffic(shape, rank_, per_node_, nodes_); }
  std::vector<int> node_of_ranks() const override { return block_nodes(size_, per_node_); }

 private:
  // Run on the queue's thread.
  void run_reduce_scatter(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                          DType dtype);
  void run_all_gather(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts, DType dtype);
  void run_all_reduce(unsigned char* buffer, size_t count, DType dtype);
  /// Copies `elem`-byte blocks of `counts` from rank order into local-index order (the blocks of
  /// ranks 0, L, 2L, ..., then of ranks 1, L + 1, ...), or back when `into_groups` is false.
  void regroup(const std::vector<size_t>& counts, size_t elem, const unsigned char* from, unsigned char* to,
               bool into_groups) const;

  MPI_Comm parent_ = MPI_COMM_NULL;  // a duplicate, for duplicate()
  int rank_ = 0, size_ = 1, per_node_ = 1, nodes_ = 1, local_ = 0;
  size_t chunk_bytes_;
  std::unique_ptr<MpiComm> world_;   // control: broadcast, barrier, doubles; all-to-all
  std::unique_ptr<ShmComm> node_;    // this node's ranks
  std::unique_ptr<MpiComm> across_;  // the ranks with this local index, in node order
  std::vector<unsigned char> grouped_, partial_;  // regrouped blocks, this rank's partial sums
  WorkQueue queue_;                               // last: its thread stops before the rest goes
};

/// With ZT_SHM_COLLECTIVES=1 in every rank's environment and `control` an MpiComm of more than one
/// rank: a ShmComm when its ranks share one node, a HierComm when they fill nodes regularly (or
/// when ZT_SHM_NODE_SIZE=N simulates nodes of N ranks on one machine); null otherwise (the caller
/// stays with MPI). Collective over control's ranks, with none of its
/// collectives in flight.
std::unique_ptr<HostComm> make_shm_comm(HostComm& control);

}  // namespace zt
