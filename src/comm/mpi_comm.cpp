#include "comm/mpi_comm.h"

#include <pthread.h>
#include <sched.h>

#include <climits>
#include <exception>

#include "comm/mpi_runtime.h"

namespace zt {

class MpiComm::MpiWork final : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = error;
    }
    done_cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

namespace {

// MPI has no bf16 or fp16 arithmetic: sums of 16-bit buffers add in fp32 and round back, one
// element at a time, through user-defined reduction operators on MPI_UINT16_T.
template <typename Half>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const Half*>(in);
  auto* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = from_float<Half>(to_float(a[i]) + to_float(b[i]));
}

MPI_Op half_op(DType dtype) {
  static MPI_Op bf16_op = MPI_OP_NULL, fp16_op = MPI_OP_NULL;
  if (bf16_op == MPI_OP_NULL) {
    ZT_MPI_CHECK(MPI_Op_create(&half_sum<bf16>, 1, &bf16_op));
    ZT_MPI_CHECK(MPI_Op_create(&half_sum<fp16>, 1, &fp16_op));
  }
  return dtype == DType::kBF16 ? bf16_op : fp16_op;
}

MPI_Datatype mpi_type(DType dtype) { return dtype == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op sum_op(DType dtype) { return dtype == DType::kF32 ? MPI_SUM : half_op(dtype); }

int as_int(size_t count) {
  ZT_CHECK(count <= size_t(INT_MAX), "a collective of ", count, " elements exceeds MPI's int counts");
  return int(count);
}

}  // namespace

MpiComm::MpiComm(MPI_Comm parent) {
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  ZT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  half_op(DType::kBF16);  // create the operators before the progress thread exists
  thread_ = std::thread([this] { progress_loop(); });
  // Open MPI waits by spinning. At normal priority the progress thread would take a core from
  // the compute threads whenever a collective overlaps compute (2 ranks on 2 cores ran stage 3
  // 1.67x slower than stage 0 this way); under SCHED_IDLE it runs on cycles nobody else wants,
  // so overlap uses idle time only, and a rank that waits for its collective gives it the core.
  sched_param idle{};
  pthread_setschedparam(thread_.native_handle(), SCHED_IDLE, &idle);
}

MpiComm::~MpiComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (MpiRuntime::initialized()) MPI_Comm_free(&comm_);
}

void MpiComm::progress_loop() {
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<MpiWork>> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      task.first();
    } catch (...) {
      error = std::current_exception();
    }
    task.second->finish(error);
  }
}

std::shared_ptr<Work> MpiComm::enqueue(std::function<void()> fn) {
  auto work = std::make_shared<MpiWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(fn), work);
    ++stats_.calls;
  }
  wake_.notify_one();
  return work;
}

std::shared_ptr<Work> MpiComm::all_reduce(void* buffer, size_t count, DType dtype) {
  stats_.all_reduce += count * dtype_size(dtype);
  const int n = as_int(count);
  return enqueue([=, this] {
    ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer, n, mpi_type(dtype), sum_op(dtype), comm_));
  });
}

std::shared_ptr<Work> MpiComm::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                              DType dtype) {
  ZT_CHECK(int(recv_counts.size()) == size_, "reduce_scatter needs one count per rank");
  std::vector<int> counts(recv_counts.size());
  size_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    counts[r] = as_int(recv_counts[r]);
    total += recv_counts[r];
  }
  stats_.reduce_scatter += total * dtype_size(dtype);
  return enqueue([=, this, counts = std::move(counts)] {
    ZT_MPI_CHECK(MPI_Reduce_scatter(send, recv, counts.data(), mpi_type(dtype), sum_op(dtype), comm_));
  });
}

std::shared_ptr<Work> MpiComm::all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                          DType dtype) {
  ZT_CHECK(int(counts.size()) == size_, "all_gather needs one count per rank");
  std::vector<int> icounts(counts.size()), displs(counts.size());
  size_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    icounts[r] = as_int(counts[r]);
    displs[r] = as_int(offset);
    offset += counts[r];
  }
  stats_.all_gather += offset * dtype_size(dtype);
  const size_t elem = dtype_size(dtype);
  const bool in_place = static_cast<const char*>(send) == static_cast<char*>(recv) + size_t(displs[rank_]) * elem;
  return enqueue([=, this, icounts = std::move(icounts), displs = std::move(displs)] {
    ZT_MPI_CHECK(MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, icounts[rank_], mpi_type(dtype), recv,
                                icounts.data(), displs.data(), mpi_type(dtype), comm_));
  });
}

std::shared_ptr<Work> MpiComm::broadcast(void* buffer, size_t count, DType dtype, int root) {
  stats_.broadcast += count * dtype_size(dtype);
  const int n = as_int(count);
  return enqueue([=, this] { ZT_MPI_CHECK(MPI_Bcast(buffer, n, mpi_type(dtype), root, comm_)); });
}

std::shared_ptr<Work> MpiComm::barrier() {
  return enqueue([this] { ZT_MPI_CHECK(MPI_Barrier(comm_)); });
}

void MpiComm::all_reduce_doubles(std::vector<double>& values, bool max) {
  double* data = values.data();
  const int n = as_int(values.size());
  enqueue([=, this] {
    ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, comm_));
  })->wait();
}

}  // namespace zt
