// HostComm: MPI's communicator over host memory, as c10d's Backend.hpp: every collective is
// asynchronous and returns a Work handle; buffers must stay valid until wait(). It is the control
// communicator (bootstrap, barriers, agreement on flags and on node-local storage, the few
// doubles of metrics) and the transport that data communicators (comm/data_comm.h) move host or
// staged buffers with. Nothing above comm/ calls MPI.
//
// Collectives are issued in the same order on every rank, and each rank's calls complete in
// issue order. Two threads that issue collectives use two HostComms (duplicate()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/traffic.h"
#include "core/dtype.h"

namespace zt {

/// A pending collective.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective has completed on this rank; rethrows its failure.
  virtual void wait() = 0;
};

/// Payload bytes handed to each kind of collective since the last reset (this rank's view).
struct CommStats {
  uint64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0, broadcast = 0, all_to_all = 0;
  uint64_t calls = 0;
  /// Of the calls, those whose buffers were shared memory (HostComm::allocate_shared) on this
  /// rank: the peers read them in place, with no staging copy.
  uint64_t in_place = 0;
  /// What this rank sent and received within its node and across nodes, by kind (data
  /// communicators count it: comm/traffic.h).
  TrafficByKind traffic{};
  uint64_t total() const { return all_reduce + reduce_scatter + all_gather + broadcast + all_to_all; }
  CommStats& operator+=(const CommStats& o) {
    all_reduce += o.all_reduce, reduce_scatter += o.reduce_scatter, all_gather += o.all_gather;
    broadcast += o.broadcast, all_to_all += o.all_to_all, calls += o.calls, in_place += o.in_place;
    for (size_t k = 0; k < traffic.size(); ++k) traffic[k] += o.traffic[k];
    return *this;
  }
};

/// Memory that the other ranks of the node read where its owner wrote it (HostComm::allocate_shared),
/// as NCCL's registered buffers: a collective whose buffers lie in such memory on every rank reads
/// the peers' inputs in place instead of copying them through staging. Freed by destruction,
/// which is collective as the allocation was.
class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  virtual unsigned char* data() = 0;
  virtual size_t bytes() const = 0;
};

class HostComm {
 public:
  virtual ~HostComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "nccl", for messages ("the nccl backend has no ...").
  virtual std::string name() const = 0;
  /// The largest collective, in elements, worth issuing in one call; callers cut bigger ones
  /// into pieces of this size. Unlimited unless the transport says otherwise.
  virtual size_t max_collective_elements() const { return SIZE_MAX; }

  /// In-place sum over ranks of `count` elements.
  virtual std::shared_ptr<Work> all_reduce(void* buffer, size_t count, DType dtype) = 0;
  /// Sums `send` (sum of recv_counts elements, the same on every rank) over ranks; rank r receives
  /// its recv_counts[r] elements (which may be 0) into `recv`. `recv` must not overlap `send`.
  virtual std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                               DType dtype) = 0;
  /// Rank r contributes counts[r] elements from `send`; everyone receives the concatenation in
  /// rank order in `recv`. `send` may point into `recv` at rank r's own place (in place).
  virtual std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                           DType dtype) = 0;
  virtual std::shared_ptr<Work> broadcast(void* buffer, size_t count, DType dtype, int root) = 0;
  /// `send` holds size() blocks of `count` elements, block q for rank q; `recv` receives rank q's
  /// block for this rank at q * count (MPI_Alltoall). `recv` must not overlap `send`.
  virtual std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DType dtype) = 0;
  /// `send` holds size() blocks one after another, block q of send_counts[q] elements for rank q;
  /// rank q's block for this rank (recv_counts[q] elements: q's send_counts[rank()]) lands in
  /// `recv` after those of the ranks before q (MPI_Alltoallv). `recv` must not overlap `send`.
  /// Throws where the transport has none (shared memory alone: a node's ranks never need it).
  virtual std::shared_ptr<Work> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                             const std::vector<size_t>& recv_counts, DType dtype);
  virtual std::shared_ptr<Work> barrier() = 0;
  /// A communicator over the same ranks whose collectives never mix with this one's (MPI_Comm_dup):
  /// for a second thread that issues collectives. Collective.
  virtual std::unique_ptr<HostComm> duplicate() = 0;
  /// A communicator over the ranks that pass the same `color` (>= 0), in this one's rank order
  /// (MPI_Comm_split), of the kind that suits where they lie (shared memory inside a node, MPI
  /// between nodes, both for several ranks on each of several nodes), each rank on the node it is
  /// on here, so that its traffic is counted over the same nodes: ZeRO++'s and MiCS's groups.
  /// Collective; only while none of this one's collectives is in flight.
  virtual std::unique_ptr<HostComm> split(int color);

  /// `bytes` of memory (zeroed) that this communicator's all-reduce and reduce-scatter read in
  /// place when every rank's buffer lies in such memory (SharedBuffer); null where the transport
  /// has none (MPI, several nodes) or the node has no room for the ranks' buffers together, and
  /// then on every rank. Collective: every rank allocates in the same order (sizes may differ)
  /// and destroys the buffers in the same order.
  virtual std::unique_ptr<SharedBuffer> allocate_shared(size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  /// This rank's bytes within and across nodes in a collective of `shape` here (comm/traffic.h):
  /// the ring over the ranks' nodes, or HierComm's two levels.
  virtual Traffic traffic(const CollectiveShape& shape) const { return ring_traffic(shape, rank(), node_of_ranks()); }
  /// Each rank's node (any labels): where a ring's edges leave a node. One node unless the
  /// transport knows better (MpiComm asks MPI which ranks share memory).
  virtual std::vector<int> node_of_ranks() const { return std::vector<int>(static_cast<size_t>(size()), 0); }

  /// Blocking, element-wise sum or max over ranks of a few doubles (norms, flags, metrics).
  virtual void all_reduce_doubles(std::vector<double>& values, bool max) = 0;
  double all_reduce_sum(double value) {
    std::vector<double> v{value};
    all_reduce_doubles(v, false);
    return v[0];
  }
  double all_reduce_max(double value) {
    std::vector<double> v{value};
    all_reduce_doubles(v, true);
    return v[0];
  }

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

}  // namespace zt
