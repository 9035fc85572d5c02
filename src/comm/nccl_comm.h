// NcclComm: the data communicator over NCCL, one NCCL communicator per process on the backend's
// GPU (NCCL refuses two ranks on one GPU: make_data_comm falls back to the staged communicator
// there). The CUDA backend only.
//
// Set-up is collective over the control communicator: rank 0 makes NCCL's unique id and
// broadcasts it over `control` (MPI), then every rank joins with ncclCommInitRank.
//
// Ordering: a collective records an event on the caller's stream, the communicator's own stream
// ("nccl") waits on it, NCCL runs on that stream, and a `done` event recorded after it is what
// DataWork::wait orders a stream after. Nothing blocks the host but DataWork::synchronize.
//
// Uneven partitions: equal counts use ncclReduceScatter / ncclAllGather; otherwise one group
// (ncclGroupStart/End) of a ncclReduce (reduce-scatter) or ncclBroadcast (all-gather) per rank
// whose count is not 0, rooted at that rank, over its piece of the concatenation. Nothing is
// padded or copied.
//
// Failures: a watchdog thread asks NCCL for the communicator's asynchronous error every 100 ms
// and checks how long the oldest collective has been in flight. On an error (a peer lost on a
// network transport: ncclRemoteError / ncclSystemError) or a collective older than
// ZT_NCCL_TIMEOUT_S (default 600 s), it prints one line naming the rank and NCCL's error, aborts
// the communicator (ncclCommAbort, so the kernels stuck in it return) and ends every rank with
// MPI_Abort through MpiRuntime::abort_job, as a failing rank does. A peer that dies under mpirun
// or srun --kill-on-bad-exit is ended by the launcher as today; see docs/design.md.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/data_comm.h"
#include "core/error.h"

/// Checks an NCCL call: throws zt::Error with file:line, the host (throw_error), the call, NCCL's
/// name for the status and its last error message (ncclGetLastError), which says what went wrong.
#define ZT_NCCL_CHECK(expr)                                                                          \
  do {                                                                                               \
    const ncclResult_t zt_nccl_status_ = (expr);                                                     \
    if (zt_nccl_status_ != ncclSuccess)                                                              \
      ::zt::throw_error(__FILE__, __LINE__, ::zt::cat(#expr " failed: ", ncclGetErrorString(zt_nccl_status_), \
                                                      " (", ::zt::nccl_last_error(), ")"));         \
  } while (0)

namespace zt {

/// NCCL's last error message ("" when it has none); ncclGetLastError(nullptr) is process-wide.
std::string nccl_last_error();
/// NCCL's dtype for ours: fp32, bf16, fp16 -> ncclFloat32, ncclBfloat16, ncclFloat16.
ncclDataType_t nccl_dtype(DType dtype);

/// A CUDA event owned by whoever holds it last (a DataWork, the watchdog's list of collectives).
class NcclEvent;
/// What the communicator, its watchdog and its DataWork handles share: the NCCL communicator and
/// its failure, which outlive the NcclComm while a handle still points at them.
struct NcclShared;

class NcclComm final : public DataComm {
 public:
  /// Collective over `control`: every rank of `control` joins, on the GPU `backend` runs on.
  /// `control` must outlive it (groups are set up over it).
  NcclComm(Backend& backend, HostComm& control);
  /// The same over a group's control communicator, which it keeps.
  NcclComm(Backend& backend, std::unique_ptr<HostComm> group_control);
  /// Waits for the collectives in flight, stops the watchdog and destroys the NCCL communicator;
  /// while an exception unwinds (this rank failed, its peers may never finish what is in flight)
  /// it aborts the communicator instead of waiting.
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  /// NCCL counts are size_t and it pipelines a collective of any size internally, so pieces buy
  /// nothing: the bucket sizes bound what the engine issues. 1 Gi elements only keeps a runaway
  /// configuration from one multi-GiB call that would stall every overlap behind it.
  size_t max_collective_elements() const override { return kNcclMaxCollectiveElements; }
  std::vector<int> node_of_ranks() const override { return nodes_; }

  std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream& after) override;
  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                           DType dtype, Stream& after) override;
  std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                       Stream& after) override;
  std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream& after) override;
  /// One send and one receive per peer in a group (NCCL has no all-to-all of its own).
  std::shared_ptr<DataWork> all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                       Stream& after) override;
  std::shared_ptr<DataWork> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                         const std::vector<size_t>& recv_counts, DType dtype, Stream& after) override;

  /// The communication stream's CUDA stream (for benchmarks and tests).
  cudaStream_t native_stream() const { return cuda_stream_; }

 protected:
  /// A NCCL communicator of its own over the group, set up over the control communicator's group.
  std::unique_ptr<DataComm> make_group(int color) override;

 private:
  // Orders the communication stream after what `after` has enqueued so far.
  cudaStream_t begin(Stream& after);
  // Records the collective's `done` event and hands it to the watchdog and the DataWork.
  std::shared_ptr<DataWork> end();
  // Checks `counts` (one per rank) and returns each rank's offset in the concatenation.
  std::vector<size_t> displacements(const char* op, const std::vector<size_t>& counts) const;
  void watchdog_loop();

  Backend& backend_;
  HostComm& control_;  // the set-up's, split for groups (it outlives the data path)
  std::unique_ptr<HostComm> group_control_;  // a group's: control_ refers to it
  int rank_ = 0, size_ = 1;
  /// Each rank's node (the control communicator's view): NCCL's rings cross nodes where ours do.
  std::vector<int> nodes_;
  void count_ring(CollectiveShape shape) { stats_.traffic[size_t(shape.kind)] += ring_traffic(shape, rank_, nodes_); }
  int device_ = 0;
  std::unique_ptr<Stream> stream_;
  cudaStream_t cuda_stream_ = nullptr;
  std::unique_ptr<Event> ready_;  // re-recorded per collective: a wait captures the record it sees
  std::shared_ptr<NcclShared> shared_;

  // The watchdog: the collectives in flight, oldest first (they complete in stream order).
  struct InFlight {
    std::shared_ptr<NcclEvent> done;
    std::chrono::steady_clock::time_point issued;
  };
  std::mutex flight_mutex_;
  std::deque<InFlight> in_flight_;
  std::chrono::milliseconds timeout_{600'000};
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace zt
