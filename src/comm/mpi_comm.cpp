#include "comm/mpi_comm.h"

#include <chrono>
#include <climits>
#include <exception>
#include <mutex>

#include "comm/block_offsets.h"
#include "comm/mpi_runtime.h"

namespace zt {

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

// How long the progress thread sleeps between two tests of a collective. Each test moves the
// collective on by what is ready (a round of its schedule, a few shared-memory fragments). While
// nobody waits for it, the long pause keeps the thread near 1% of a core beside the compute
// threads; while a thread waits, the short one costs nothing measurable (16 MB all-reduce and
// reduce-scatter at 2 ranks: the same time as testing without pause).
constexpr auto kIdlePoll = std::chrono::microseconds(50);
constexpr auto kWaitedPoll = std::chrono::microseconds(5);

// MPI's progress is the process's, not a communicator's: a test of one communicator's collective
// moves every collective in flight, so the progress thread of the world can copy the bytes of a
// group's all-gather (an hpZ or MiCS group, with its own thread) into their buffer, and the
// group's thread then finds it complete. Open MPI orders the two inside itself, where
// ThreadSanitizer cannot see; this lock, held by every progress thread around each start and
// test, orders them where it can (without it TSan reported the copy against the read of the
// gathered weights after the group's wait). The calls it holds return at once, so it costs no
// waiting; blocking MPI calls (set-up, on the caller's thread) do not take it.
namespace {
std::mutex& progress_lock() {
  static std::mutex lock;
  return lock;
}
}  // namespace

ColorSplit split_by_color(MPI_Comm parent, int color) {
  int rank = 0, size = 0;
  ZT_MPI_CHECK(MPI_Comm_rank(parent, &rank));
  ZT_MPI_CHECK(MPI_Comm_size(parent, &size));
  std::vector<int> colors(static_cast<size_t>(size));
  ZT_MPI_CHECK(MPI_Allgather(&color, 1, MPI_INT, colors.data(), 1, MPI_INT, parent));
  ColorSplit out;
  for (int r = 0; r < size; ++r) {
    if (colors[size_t(r)] == color) out.members.push_back(r);
  }
  ZT_MPI_CHECK(MPI_Comm_split(parent, color, rank, &out.comm));
  return out;
}

MpiComm::MpiComm(MPI_Comm parent, std::vector<int> node_of_ranks) : nodes_(std::move(node_of_ranks)) {
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  ZT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  ZT_CHECK(nodes_.size() == size_t(size_), "MpiComm: ", nodes_.size(), " node labels for ", size_, " ranks");
  half_op(DType::kBF16);  // as the other constructor
}

std::unique_ptr<HostComm> MpiComm::split(int color) {
  ColorSplit s = split_by_color(comm_, color);
  std::vector<int> nodes;
  for (int r : s.members) nodes.push_back(nodes_[size_t(r)]);
  auto out = std::make_unique<MpiComm>(s.comm, std::move(nodes));
  MPI_Comm_free(&s.comm);
  return out;
}

MpiComm::MpiComm(MPI_Comm parent) {
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  ZT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  half_op(DType::kBF16);  // create the operators before any collective runs on the queue's thread
  // Each rank's node, named by its lowest rank there, for the traffic's split (comm/traffic.h).
  MPI_Comm node = MPI_COMM_NULL;
  ZT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int label = rank_;
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &label, 1, MPI_INT, MPI_MIN, node));
  ZT_MPI_CHECK(MPI_Comm_free(&node));
  nodes_.assign(static_cast<size_t>(size_), 0);
  ZT_MPI_CHECK(MPI_Allgather(&label, 1, MPI_INT, nodes_.data(), 1, MPI_INT, comm_));
}

MpiComm::~MpiComm() {
  queue_.stop();
  if (MpiRuntime::initialized()) MPI_Comm_free(&comm_);
}

void MpiComm::drive(MPI_Request& request) {
  for (;;) {
    int complete = 0;
    {
      std::lock_guard<std::mutex> lock(progress_lock());
      ZT_MPI_CHECK(MPI_Test(&request, &complete, MPI_STATUS_IGNORE));
    }
    if (complete) return;
    if (queue_.waiters() == 0) {
      queue_.pause_unless_waited(kIdlePoll);
    } else {
      // Even while a thread waits, the pause stays: a thread that tests without pause holds its
      // core against the peer rank's compute or a busy neighbour, and under load steps took 3.9x
      // their quiet time this way, 1.9x with the pause, on 2 cores (bench_under_load.sh).
      std::this_thread::sleep_for(kWaitedPoll);
    }
  }
}

std::shared_ptr<Work> MpiComm::enqueue(Start start) {
  ++stats_.calls;
  return queue_.enqueue([this, start = std::move(start)] {
    MPI_Request request;
    {
      std::lock_guard<std::mutex> lock(progress_lock());
      request = start();
    }
    drive(request);
  });
}

std::shared_ptr<Work> MpiComm::all_reduce(void* buffer, size_t count, DType dtype) {
  stats_.all_reduce += count * dtype_size(dtype);
  const int n = as_int(count);
  return enqueue([=, this] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, n, mpi_type(dtype), sum_op(dtype), comm_, &request));
    return request;
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
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts.data(), mpi_type(dtype), sum_op(dtype), comm_, &request));
    return request;
  });
}

std::shared_ptr<Work> MpiComm::all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                          DType dtype) {
  ZT_CHECK(int(counts.size()) == size_, "all_gather needs one count per rank");
  const std::vector<size_t> offsets = block_offsets(counts);
  std::vector<int> icounts(counts.size()), displs(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    icounts[r] = as_int(counts[r]);
    displs[r] = as_int(offsets[r]);
  }
  stats_.all_gather += (offsets.back() + counts.back()) * dtype_size(dtype);
  const size_t elem = dtype_size(dtype);
  const bool in_place = static_cast<const char*>(send) == static_cast<char*>(recv) + size_t(displs[rank_]) * elem;
  return enqueue([=, this, icounts = std::move(icounts), displs = std::move(displs)] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, icounts[rank_], mpi_type(dtype), recv,
                                 icounts.data(), displs.data(), mpi_type(dtype), comm_, &request));
    return request;
  });
}

std::shared_ptr<Work> MpiComm::broadcast(void* buffer, size_t count, DType dtype, int root) {
  stats_.broadcast += count * dtype_size(dtype);
  const int n = as_int(count);
  return enqueue([=, this] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Ibcast(buffer, n, mpi_type(dtype), root, comm_, &request));
    return request;
  });
}

std::shared_ptr<Work> MpiComm::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  stats_.all_to_all += count * size_t(size_) * dtype_size(dtype);
  const int n = as_int(count);
  return enqueue([=, this] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Ialltoall(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_, &request));
    return request;
  });
}

std::shared_ptr<Work> MpiComm::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                            const std::vector<size_t>& recv_counts, DType dtype) {
  ZT_CHECK(int(send_counts.size()) == size_ && int(recv_counts.size()) == size_, "all_to_all_v needs a count per rank");
  std::vector<int> sc(send_counts.size()), sd(sc.size()), rc(sc.size()), rd(sc.size());
  const std::vector<size_t> so = block_offsets(send_counts), ro = block_offsets(recv_counts);
  for (size_t q = 0; q < sc.size(); ++q) {
    sc[q] = as_int(send_counts[q]), sd[q] = as_int(so[q]), rc[q] = as_int(recv_counts[q]), rd[q] = as_int(ro[q]);
  }
  stats_.all_to_all += (so.back() + send_counts.back()) * dtype_size(dtype);
  return enqueue([=, this, sc = std::move(sc), sd = std::move(sd), rc = std::move(rc), rd = std::move(rd)] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), mpi_type(dtype), recv, rc.data(), rd.data(),
                                mpi_type(dtype), comm_, &request));
    return request;
  });
}

std::shared_ptr<Work> MpiComm::barrier() {
  return enqueue([this] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    return request;
  });
}

void MpiComm::all_reduce_doubles(std::vector<double>& values, bool max) {
  double* data = values.data();
  const int n = as_int(values.size());
  enqueue([=, this] {
    MPI_Request request;
    ZT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, comm_, &request));
    return request;
  })->wait();
}

}  // namespace zt
