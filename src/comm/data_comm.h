// DataComm: the collectives of the data path, on the backend's buffers, ordered by streams as
// NCCL's are. A collective starts after the work enqueued so far on the caller's stream (its
// inputs are ready) and runs on the communicator's own stream; the DataWork it returns orders a
// stream after it (wait), and only synchronize() blocks the host. So a reduction overlaps the
// compute stream's backward on a device, and nothing waits that need not.
//
// Partitions may be uneven (any model size): reduce_scatter and all_gather take one count per
// rank, and a count may be 0.
//
// Implementations:
//   direct   (comm/direct_comm.cpp) a synchronous backend (the CPU): device memory is host memory
//            and streams are always complete, so MPI moves the buffers themselves; wait() is a
//            host wait for MPI's progress thread.
//   staged   (comm/staged_comm.cpp) any other backend: each collective is copied into pinned
//            staging on the communication stream, moved by MPI from a host function on that
//            stream, and copied back (device -> pinned -> MPI -> device).
//   nccl     (comm/nccl_comm.cpp) the CUDA backend with a GPU per rank: NCCL on the
//            communicator's own stream, one NCCL communicator per process, its unique id sent over
//            the control communicator; a watchdog ends every rank when NCCL reports a failure.
//
// make_data_comm chooses: direct on a synchronous backend; on the CUDA backend nccl, unless two
// ranks share a GPU (NCCL refuses them) or ZT_DATA_COMM=staged; staged otherwise.
// ZT_DATA_COMM=nccl insists on NCCL and is an error where it cannot serve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/dtype.h"

namespace zt {

/// A collective in flight.
class DataWork {
 public:
  virtual ~DataWork() = default;
  /// Work enqueued on `stream` after this call runs after the collective (on a synchronous
  /// backend this waits on the host). Rethrows the collective's failure where it can see it.
  virtual void wait(Stream& stream) = 0;
  /// Blocks the host until the collective has completed on this rank.
  virtual void synchronize() = 0;
};

/// NcclComm's largest collective per call (comm/nccl_comm.h says why); zero_estimate sizes GPU
/// buckets with it.
inline constexpr size_t kNcclMaxCollectiveElements = size_t(1) << 30;

class DataComm {
 public:
  DataComm() = default;
  DataComm(const DataComm&) = delete;
  DataComm& operator=(const DataComm&) = delete;
  virtual ~DataComm();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "mpi, staged through pinned memory" or "nccl", for messages and logs.
  virtual std::string name() const = 0;
  /// The largest collective, in elements, worth issuing in one call; callers cut bigger ones
  /// into pieces of this size.
  virtual size_t max_collective_elements() const = 0;

  /// In-place sum over ranks of `count` elements.
  virtual std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream& after) = 0;
  /// Sums `send` (sum of recv_counts elements, the same on every rank) over ranks; rank r receives
  /// its recv_counts[r] elements into `recv`. `recv` must not overlap `send`.
  virtual std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                                   DType dtype, Stream& after) = 0;
  /// Rank r contributes counts[r] elements from `send`; everyone receives the concatenation in
  /// rank order in `recv`. `send` may point into `recv` at this rank's own place (in place).
  virtual std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                               DType dtype, Stream& after) = 0;
  virtual std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream& after) = 0;
  /// `send` holds size() blocks of `count` elements, block q for rank q; `recv` receives rank q's
  /// block for this rank at q * count. `recv` must not overlap `send`.
  virtual std::shared_ptr<DataWork> all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                               Stream& after) = 0;
  /// HostComm::all_to_all_v on the backend's buffers.
  virtual std::shared_ptr<DataWork> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                                 const std::vector<size_t>& recv_counts, DType dtype,
                                                 Stream& after) = 0;
  /// Device memory that this communicator's all-reduce and reduce-scatter read in place on the
  /// peers (HostComm::allocate_shared: the direct communicator over shared memory), or null
  /// (every other one, and then on every rank). Collective, as HostComm's.
  virtual std::unique_ptr<SharedBuffer> allocate_shared(size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  /// Each rank's node (labels), where the traffic's split comes from (comm/traffic.h).
  virtual std::vector<int> node_of_ranks() const { return std::vector<int>(static_cast<size_t>(size()), 0); }

  /// A data communicator of the same kind over the ranks that pass the same `color`
  /// (HostComm::split's groups), whose collectives order after the same streams. What it moves
  /// counts in this one's stats() too (a run's traffic_bytes are every group's). It must be
  /// destroyed before this one. Collective; only while none of this one's collectives is in flight.
  std::unique_ptr<DataComm> split(int color);

  /// What this communicator and the groups split from it have moved since the last reset.
  CommStats stats() const;
  void reset_stats();

 protected:
  /// The group communicator of split(), of this one's kind.
  virtual std::unique_ptr<DataComm> make_group(int color) = 0;
  /// Adds a collective (or a piece of one, as issued) to stats_.traffic; returns this rank's part.
  Traffic count_traffic(const HostComm& over, CollectiveShape shape) {
    const Traffic t = over.traffic(shape);
    stats_.traffic[size_t(shape.kind)] += t;
    return t;
  }
  CommStats stats_;

 private:
  DataComm* parent_ = nullptr;      // split() from it
  std::vector<DataComm*> groups_;  // split() from this one, alive
};

/// The data communicator for `backend` over the ranks of `control`: direct on a synchronous
/// backend (sharing `control`, whose collectives the same thread issues); nccl on the CUDA backend
/// when every rank has a GPU of its own (its set-up runs over `control`); staged otherwise (over a
/// duplicate of `control`, since a stream's thread issues its collectives). ZT_DATA_COMM (auto,
/// staged, nccl) overrides the choice on the CUDA backend; a choice that cannot be served is a
/// UsageError. Collective.
std::unique_ptr<DataComm> make_data_comm(Backend& backend, HostComm& control);

}  // namespace zt
