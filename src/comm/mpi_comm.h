// MpiComm: the Communicator over MPI for host buffers.
//
// Progress: with Open MPI a non-blocking collective makes no progress unless some thread is
// inside MPI (docs/design.md: everything happened in MPI_Wait). So MpiComm runs every
// collective, in issue order, as a blocking call on its own progress thread; the main thread
// queues work and computes, and wait() only blocks when the result is really needed. All MPI
// calls of this communicator go through that thread, including the blocking scalar helpers, so
// every rank sees the same order.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/communicator.h"

namespace zt {

class MpiComm final : public Communicator {
 public:
  /// Duplicates `parent` (MPI_COMM_WORLD, or MPI_COMM_SELF for a one-rank reference).
  explicit MpiComm(MPI_Comm parent);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  /// 4 Mi elements. Open MPI 4.1's shared-memory reduce-scatter took 566 ms for 200 MB in 50 M
  /// element pieces and 115-125 ms in 4 M pieces on the 2-core test machine (all-reduce: 331 vs
  /// 115 ms), so buckets are reduced in pieces of at most this size.
  size_t max_collective_elements() const override { return size_t(4) << 20; }

  std::shared_ptr<Work> all_reduce(void* buffer, size_t count, DType dtype) override;
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                       DType dtype) override;
  std::shared_ptr<Work> all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                   DType dtype) override;
  std::shared_ptr<Work> broadcast(void* buffer, size_t count, DType dtype, int root) override;
  std::shared_ptr<Work> barrier() override;
  void all_reduce_doubles(std::vector<double>& values, bool max) override;

 private:
  class MpiWork;
  std::shared_ptr<Work> enqueue(std::function<void()> fn);
  void progress_loop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<MpiWork>>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace zt
