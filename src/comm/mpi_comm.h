// MpiComm: the HostComm over MPI.
//
// Progress: with Open MPI a non-blocking collective makes no progress unless some thread is
// inside MPI (docs/design.md: everything happened in MPI_Wait). So MpiComm has its own progress
// thread, at normal priority, that starts every collective in issue order as a non-blocking call
// and drives it with MPI_Test, sleeping between tests: 50 us while no thread waits for a result,
// so that it takes almost no CPU from the compute threads it overlaps, and 5 us once one does.
// It never spins, so a busy machine slows it no more than any other thread. All MPI calls of
// this communicator go through that thread, including the blocking scalar helpers, so every
// rank sees the same order.
//
// An earlier design ran blocking collectives on a SCHED_IDLE thread: with one busy process per
// core beside the job, that thread never ran and a 16 ms step took 70 s (issue 13).
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "comm/work_queue.h"

namespace zt {

/// 4 Mi elements. Open MPI 4.1's shared-memory reduce-scatter took 566 ms for 200 MB in 50 M
/// element pieces and 115-125 ms in 4 M pieces on the 2-core test machine (all-reduce: 331 vs
/// 115 ms), so buckets are reduced in pieces of at most this size (zero_estimate sizes them so).
inline constexpr size_t kMpiMaxCollectiveElements = size_t(4) << 20;

/// The ranks of `parent` that pass the same `color`: their communicator (MPI_Comm_split, in
/// parent's rank order; the caller frees it) and their ranks in `parent`. Collective.
struct ColorSplit {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> members;
};
ColorSplit split_by_color(MPI_Comm parent, int color);

class MpiComm final : public HostComm {
 public:
  /// Duplicates `parent` (MPI_COMM_WORLD, or MPI_COMM_SELF for a one-rank reference).
  explicit MpiComm(MPI_Comm parent);
  /// The same, its ranks on the nodes `node_of_ranks` names instead of those MPI sees (a group of
  /// ranks on simulated nodes: HierComm::split).
  MpiComm(MPI_Comm parent, std::vector<int> node_of_ranks);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  size_t max_collective_elements() const override { return kMpiMaxCollectiveElements; }

  std::shared_ptr<Work> all_reduce(void* buffer, size_t count, DType dtype) override;
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                       DType dtype) override;
  std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                   DType dtype) override;
  std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  std::shared_ptr<Work> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                     const std::vector<size_t>& recv_counts, DType dtype) override;
  std::shared_ptr<Work> broadcast(void* buffer, size_t count, DType dtype, int root) override;
  std::shared_ptr<Work> barrier() override;
  std::unique_ptr<HostComm> duplicate() override { return std::make_unique<MpiComm>(comm_, nodes_); }
  std::unique_ptr<HostComm> split(int color) override;
  void all_reduce_doubles(std::vector<double>& values, bool max) override;
  /// The ranks that share memory (MPI_COMM_TYPE_SHARED) share a node.
  std::vector<int> node_of_ranks() const override { return nodes_; }
  /// The MPI communicator (a duplicate of the parent), for a communicator over the same ranks
  /// (make_shm_comm). Only while none of this one's collectives is in flight.
  MPI_Comm mpi_comm() const { return comm_; }

 private:
  /// Starts one non-blocking collective and returns its request.
  using Start = std::function<MPI_Request()>;
  std::shared_ptr<Work> enqueue(Start start);
  /// On the queue's thread: tests `request` until it completes, pausing between tests.
  void drive(MPI_Request& request);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<int> nodes_;  // each rank's node: its lowest rank
  WorkQueue queue_;  // the progress thread
};

}  // namespace zt
