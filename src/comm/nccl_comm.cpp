#include "comm/nccl_comm.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"

namespace zt {

std::string nccl_last_error() {
  const char* text = ncclGetLastError(nullptr);
  return text && *text ? text : "no further detail from NCCL";
}

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
  }
  throw Error(cat("the nccl communicator has no dtype ", int(dtype)));
}

class NcclEvent {
 public:
  NcclEvent() { ZT_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, cudaEventDisableTiming)); }
  ~NcclEvent() { cudaEventDestroy(handle_); }  // CUDA defers the release until the event has run
  NcclEvent(const NcclEvent&) = delete;
  NcclEvent& operator=(const NcclEvent&) = delete;
  cudaEvent_t handle() const { return handle_; }

 private:
  cudaEvent_t handle_ = nullptr;
};

struct NcclShared {
  ncclComm_t comm = nullptr;
  int rank = 0;
  std::mutex mutex;    // serialises NCCL's error queries with abort and destroy
  bool alive = false;  // `comm` not yet destroyed or aborted
  std::atomic<bool> failed{false};
  std::string why;  // set once, before `failed`

  // Throws when the watchdog has found the communicator failed, or NCCL reports an asynchronous
  // error now: the kernels of an aborted communicator return, so a completed event alone does
  // not mean the data arrived.
  void check() {
    if (failed.load()) throw Error(why);
    std::lock_guard<std::mutex> lock(mutex);
    if (!alive) return;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    const ncclResult_t e = r != ncclSuccess ? r : async;
    if (e != ncclSuccess && e != ncclInProgress) {
      throw Error(cat("the NCCL communicator failed on rank ", rank, ": ", ncclGetErrorString(e), " (",
                      nccl_last_error(), ")"));
    }
  }
  // Aborts (a failure: the kernels stuck in a collective return) or destroys the communicator, once.
  void release(bool abort) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!alive) return;
    alive = false;
    if (abort) {
      ncclCommAbort(comm);
    } else if (const ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) {
      log_warn("rank ", rank, ": ncclCommDestroy: ", ncclGetErrorString(r), " (", nccl_last_error(), ")");
    }
  }
};

namespace {

// How often the watchdog looks, and how a host wait polls: the first polls yield (a small
// collective completes within microseconds), later ones sleep so that a long wait leaves the
// core to the compute threads.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);
constexpr int kYieldPolls = 2000;
constexpr auto kSleepPoll = std::chrono::microseconds(50);

// ZT_NCCL_TIMEOUT_S, the longest a collective may stay in flight before the watchdog ends the
// job: 600 s unless set. Not shorter by default: a collective may legitimately wait minutes for a
// peer that is still computing (an offloaded optimizer step on a large model, a slow checkpoint).
std::chrono::milliseconds nccl_timeout() {
  const char* text = std::getenv("ZT_NCCL_TIMEOUT_S");
  if (!text || !*text) return std::chrono::milliseconds(600'000);
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  ZT_USAGE_CHECK(end && *end == '\0' && s >= 1 && s <= 1e7, "ZT_NCCL_TIMEOUT_S must be a number of seconds >= 1 (got '",
                 text, "')");
  return std::chrono::milliseconds(int64_t(s * 1000));
}

// NCCL moves device memory; the engine's collectives may also name host memory: an offloaded
// partition, the master weights gathered for a checkpoint, a parameter gathered into a host
// tensor. Such a buffer goes through a device temporary on the communication stream, copied in
// before the collective and out after it. The temporaries are freed as soon as the copies are
// enqueued: the caching allocator fences a freed block on every stream, so it is reused only
// after the communication stream is past them.
class DeviceStaging {
 public:
  DeviceStaging(Backend& backend, cudaStream_t stream) : backend_(backend), stream_(stream) {}
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging() {
    for (const Temp& t : temps_) backend_.deallocate(Pool::kDevice, t.device, t.bytes);
  }

  static bool on_device(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  }
  /// A device copy of `bytes` at host `p` (p itself when it is device memory).
  const void* in(const void* p, size_t bytes) {
    if (bytes == 0 || on_device(p)) return p;
    void* d = temp(bytes);
    ZT_CUDA_CHECK(cudaMemcpyAsync(d, p, bytes, cudaMemcpyDefault, stream_), "(staging an NCCL input)");
    return d;
  }
  /// Where the collective writes `bytes` meant for `p`; copied to `p` by finish(). With
  /// `copy_in`, the device place starts as a copy of `p` (an in-place collective).
  void* out(void* p, size_t bytes, bool copy_in) {
    if (bytes == 0 || on_device(p)) return p;
    void* d = temp(bytes);
    if (copy_in) ZT_CUDA_CHECK(cudaMemcpyAsync(d, p, bytes, cudaMemcpyDefault, stream_), "(staging an NCCL buffer)");
    outputs_.push_back({p, d, bytes});
    return d;
  }
  /// Enqueues the copies of the outputs back to host memory, after the collective.
  void finish() {
    for (const Output& o : outputs_) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(o.host, o.device, o.bytes, cudaMemcpyDefault, stream_), "(an NCCL output)");
    }
  }

 private:
  struct Temp {
    void* device;
    size_t bytes;
  };
  struct Output {
    void* host;
    void* device;
    size_t bytes;
  };
  void* temp(size_t bytes) {
    void* d = backend_.allocate(Pool::kDevice, bytes);
    temps_.push_back({d, bytes});
    return d;
  }
  Backend& backend_;
  cudaStream_t stream_;
  std::vector<Temp> temps_;
  std::vector<Output> outputs_;
};

class NcclWork final : public DataWork {
 public:
  NcclWork(std::shared_ptr<NcclEvent> done, std::shared_ptr<NcclShared> shared)
      : done_(std::move(done)), shared_(std::move(shared)) {}

  void wait(Stream& stream) override {
    if (shared_->failed.load()) throw Error(shared_->why);
    ZT_CUDA_CHECK(cudaStreamWaitEvent(cuda::native_stream(stream), done_->handle(), 0), "(stream '", stream.name(),
                  "' after an NCCL collective)");
  }

  // Polls rather than cudaEventSynchronize: a collective whose peer is gone may never complete,
  // and the host must see the watchdog's verdict instead of blocking for ever.
  void synchronize() override {
    for (int polls = 0;; ++polls) {
      const cudaError_t e = cudaEventQuery(done_->handle());
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) ZT_CUDA_CHECK(e, "(an NCCL collective)");
      if (shared_->failed.load()) throw Error(shared_->why);
      if (polls < kYieldPolls) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kSleepPoll);
      }
    }
    shared_->check();
  }

 private:
  std::shared_ptr<NcclEvent> done_;
  std::shared_ptr<NcclShared> shared_;
};

bool all_equal(const std::vector<size_t>& counts) {
  for (size_t c : counts) {
    if (c != counts[0]) return false;
  }
  return true;
}

// Issues call(r) for every rank r in one NCCL group. A failure closes the group before it is
// reported, or the next NCCL call would join it.
template <typename Call>
void grouped(int ranks, Call call) {
  ZT_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < ranks; ++r) {
    const ncclResult_t status = call(r);
    if (status != ncclSuccess) {
      ncclGroupEnd();
      ZT_NCCL_CHECK(status);
    }
  }
  ZT_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace

NcclComm::NcclComm(Backend& backend, std::unique_ptr<HostComm> group_control)
    : NcclComm(backend, *group_control) {
  group_control_ = std::move(group_control);
}

std::unique_ptr<DataComm> NcclComm::make_group(int color) {
  return std::make_unique<NcclComm>(backend_, control_.split(color));
}

NcclComm::NcclComm(Backend& backend, HostComm& control)
    : backend_(backend),
      control_(control),
      rank_(control.rank()),
      size_(control.size()),
      nodes_(control.node_of_ranks()),
      shared_(std::make_shared<NcclShared>()) {
  ZT_CHECK(backend.name() == "cuda", "the nccl communicator needs the cuda backend, not ", backend.name());
  timeout_ = nccl_timeout();
  device_ = cuda::backend_device(backend);
  ZT_CUDA_CHECK(cudaSetDevice(device_), "binding GPU ", device_, " for NCCL");
  stream_ = backend.create_stream("nccl");
  cuda_stream_ = cuda::native_stream(*stream_);
  ready_ = backend.create_event();

  // Rank 0 makes the unique id; every rank learns whether it could before anyone waits for it.
  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) % 2 == 0, "the id travels as 16-bit elements");
  std::string id_error;
  if (rank_ == 0) {
    try {
      ZT_NCCL_CHECK(ncclGetUniqueId(&id));
    } catch (const Error& e) {
      id_error = e.what();
    }
  }
  if (control.all_reduce_max(id_error.empty() ? 0.0 : 1.0) > 0) {
    throw Error(rank_ == 0 ? id_error : "rank 0 could not create NCCL's unique id (see its message)");
  }
  // Raw bytes as 16-bit elements: a broadcast moves them unchanged.
  control.broadcast(&id, sizeof id / 2, DType::kBF16, 0)->wait();

  ZT_NCCL_CHECK(ncclCommInitRank(&shared_->comm, size_, id, rank_));
  shared_->rank = rank_;
  shared_->alive = true;
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

NcclComm::~NcclComm() {
  // While an exception unwinds, this rank has failed and its peers may never finish what is in
  // flight: abort rather than wait (main then ends every rank).
  const bool unwinding = std::uncaught_exceptions() > 0;
  if (!unwinding) {
    // Let the collectives in flight finish; the watchdog still guards the wait.
    for (;;) {
      const cudaError_t e = cudaStreamQuery(cuda_stream_);
      if (e != cudaErrorNotReady || shared_->failed.load()) break;
      std::this_thread::sleep_for(kSleepPoll);
    }
  }
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  shared_->release(unwinding || shared_->failed.load());
  // stream_ goes after this: its destructor synchronises, which an aborted communicator allows.
}

void NcclComm::watchdog_loop() {
  cudaSetDevice(device_);  // event queries on this thread concern the communicator's GPU
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(stop_mutex_);
      if (stop_cv_.wait_for(lock, kWatchdogPeriod, [&] { return stopping_; })) return;
    }
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (!shared_->alive) return;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(shared_->comm, &async);
      const ncclResult_t e = r != ncclSuccess ? r : async;
      if (e != ncclSuccess && e != ncclInProgress) {
        failure = cat("NCCL reports ", ncclGetErrorString(e), " (", nccl_last_error(), ")");
      }
    }
    if (failure.empty()) {
      // The oldest collective in flight: completions come in stream order, so the front tells.
      std::lock_guard<std::mutex> lock(flight_mutex_);
      while (!in_flight_.empty()) {
        const cudaError_t e = cudaEventQuery(in_flight_.front().done->handle());
        if (e == cudaSuccess) {
          in_flight_.pop_front();
          continue;
        }
        if (e != cudaErrorNotReady) {
          // A CUDA failure (a kernel's, sticky): the thread that synchronises next rethrows it
          // and ends the job; it is not the communicator's to report.
          cudaGetLastError();
          in_flight_.clear();
          break;
        }
        const auto age = std::chrono::steady_clock::now() - in_flight_.front().issued;
        if (age > timeout_) {
          failure = cat("an NCCL collective has not completed in ",
                        std::chrono::duration_cast<std::chrono::seconds>(age).count(),
                        " s (ZT_NCCL_TIMEOUT_S): a peer rank is gone or stuck");
        }
        break;
      }
    }
    if (failure.empty()) continue;

    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    shared_->why = cat("rank ", rank_, " on ", host, " (GPU ", device_, "): ", failure);
    shared_->failed.store(true);
    // One line first: the abort below could take a while, and MPI_Abort ends this process.
    log_line(LogLevel::kError, shared_->why);
    shared_->release(/*abort=*/true);
    MpiRuntime::abort_job(1, "the NCCL communicator failed and was aborted: ending every rank");
  }
}

cudaStream_t NcclComm::begin(Stream& after) {
  if (shared_->failed.load()) throw Error(shared_->why);
  ++stats_.calls;
  backend_.record(*ready_, after);
  backend_.wait(*stream_, *ready_);
  return cuda_stream_;
}

std::shared_ptr<DataWork> NcclComm::end() {
  auto done = std::make_shared<NcclEvent>();
  ZT_CUDA_CHECK(cudaEventRecord(done->handle(), cuda_stream_), "(after an NCCL collective)");
  {
    std::lock_guard<std::mutex> lock(flight_mutex_);
    in_flight_.push_back({done, std::chrono::steady_clock::now()});
  }
  return std::make_shared<NcclWork>(std::move(done), shared_);
}

std::vector<size_t> NcclComm::displacements(const char* op, const std::vector<size_t>& counts) const {
  ZT_CHECK(int(counts.size()) == size_, op, " needs one count per rank (", counts.size(), " for ", size_, " ranks)");
  std::vector<size_t> displ(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), displ.begin(), size_t(0));
  return displ;
}

std::shared_ptr<DataWork> NcclComm::all_reduce(void* buffer, size_t count, DType dtype, Stream& after) {
  stats_.all_reduce += count * dtype_size(dtype);
  count_ring({Collective::kAllReduce, {count}, dtype_size(dtype)});
  cudaStream_t s = begin(after);
  DeviceStaging staging(backend_, s);
  void* b = staging.out(buffer, count * dtype_size(dtype), /*copy_in=*/true);
  if (count > 0) ZT_NCCL_CHECK(ncclAllReduce(b, b, count, nccl_dtype(dtype), ncclSum, shared_->comm, s));
  staging.finish();
  return end();
}

std::shared_ptr<DataWork> NcclComm::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                                                   DType dtype, Stream& after) {
  const std::vector<size_t> displ = displacements("reduce_scatter", counts);
  const size_t e = dtype_size(dtype);
  const ncclDataType_t t = nccl_dtype(dtype);
  const size_t total = displ.back() + counts.back();
  stats_.reduce_scatter += total * e;
  count_ring({Collective::kReduceScatter, counts, e});  // uneven: reduces to each rank, counted as the ring
  cudaStream_t s = begin(after);
  DeviceStaging staging(backend_, s);
  send = staging.in(send, total * e);
  recv = staging.out(recv, counts[size_t(rank_)] * e, /*copy_in=*/false);
  if (all_equal(counts)) {
    if (counts[0] > 0) ZT_NCCL_CHECK(ncclReduceScatter(send, recv, counts[0], t, ncclSum, shared_->comm, s));
    staging.finish();
    return end();
  }
  // Uneven: rank r's piece is reduced onto r. ncclReduce reads recvbuff on the root only, so the
  // other ranks pass their own `recv`, whatever its size (null when their count is 0).
  const auto* bytes = static_cast<const unsigned char*>(send);
  grouped(size_, [&](int r) {
    if (counts[size_t(r)] == 0) return ncclSuccess;
    return ncclReduce(bytes + displ[size_t(r)] * e, recv, counts[size_t(r)], t, ncclSum, r, shared_->comm, s);
  });
  staging.finish();
  return end();
}

std::shared_ptr<DataWork> NcclComm::all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                               DType dtype, Stream& after) {
  const std::vector<size_t> displ = displacements("all_gather", counts);
  const size_t e = dtype_size(dtype);
  const ncclDataType_t t = nccl_dtype(dtype);
  const size_t total = displ.back() + counts.back(), mine = displ[size_t(rank_)] * e;
  stats_.all_gather += total * e;
  count_ring({Collective::kAllGather, counts, e});  // uneven: broadcasts from each rank, counted as the ring
  cudaStream_t s = begin(after);
  const bool in_place = send == static_cast<unsigned char*>(recv) + mine;
  DeviceStaging staging(backend_, s);
  auto* out = static_cast<unsigned char*>(staging.out(recv, total * e, /*copy_in=*/in_place));
  send = in_place ? out + mine : staging.in(send, counts[size_t(rank_)] * e);
  recv = out;
  if (all_equal(counts)) {
    // NCCL's in-place all-gather is send == recv + rank * count: this contract's in place.
    if (counts[0] > 0) ZT_NCCL_CHECK(ncclAllGather(send, recv, counts[0], t, shared_->comm, s));
    staging.finish();
    return end();
  }
  // Uneven: each rank broadcasts its piece into its place; a root whose `send` is already there
  // (in place) copies nothing. ncclBroadcast reads sendbuff on the root only.
  grouped(size_, [&](int r) {
    if (counts[size_t(r)] == 0) return ncclSuccess;
    unsigned char* place = out + displ[size_t(r)] * e;
    const void* from = r == rank_ ? send : place;
    return ncclBroadcast(from, place, counts[size_t(r)], t, r, shared_->comm, s);
  });
  staging.finish();
  return end();
}

std::shared_ptr<DataWork> NcclComm::broadcast(void* buffer, size_t count, DType dtype, int root, Stream& after) {
  ZT_CHECK(root >= 0 && root < size_, "broadcast from rank ", root, " of ", size_);
  stats_.broadcast += count * dtype_size(dtype);
  count_ring({Collective::kBroadcast, {count}, dtype_size(dtype), root});
  cudaStream_t s = begin(after);
  DeviceStaging staging(backend_, s);
  void* b = staging.out(buffer, count * dtype_size(dtype), /*copy_in=*/rank_ == root);
  if (count > 0) ZT_NCCL_CHECK(ncclBroadcast(b, b, count, nccl_dtype(dtype), root, shared_->comm, s));
  staging.finish();
  return end();
}

std::shared_ptr<DataWork> NcclComm::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                                 const std::vector<size_t>& recv_counts, DType dtype, Stream& after) {
  const size_t e = dtype_size(dtype);
  const std::vector<size_t> so = displacements("all_to_all_v", send_counts);
  const std::vector<size_t> ro = displacements("all_to_all_v", recv_counts);
  const size_t sent = so.back() + send_counts.back(), received = ro.back() + recv_counts.back();
  stats_.all_to_all += sent * e;
  count_ring({Collective::kAllToAll, send_counts, e, 0, recv_counts});
  cudaStream_t s = begin(after);
  DeviceStaging staging(backend_, s);
  const auto* in = static_cast<const unsigned char*>(staging.in(send, sent * e));
  auto* out = static_cast<unsigned char*>(staging.out(recv, received * e, /*copy_in=*/false));
  const ncclDataType_t t = nccl_dtype(dtype);
  grouped(size_, [&](int r) {
    const size_t q = size_t(r);
    ncclResult_t result = ncclSuccess;
    if (send_counts[q] > 0) result = ncclSend(in + so[q] * e, send_counts[q], t, r, shared_->comm, s);
    if (result == ncclSuccess && recv_counts[q] > 0) {
      result = ncclRecv(out + ro[q] * e, recv_counts[q], t, r, shared_->comm, s);
    }
    return result;
  });
  staging.finish();
  return end();
}

std::shared_ptr<DataWork> NcclComm::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                               Stream& after) {
  const size_t e = dtype_size(dtype), total = count * size_t(size_);
  stats_.all_to_all += total * e;
  count_ring({Collective::kAllToAll, {count}, e});
  cudaStream_t s = begin(after);
  DeviceStaging staging(backend_, s);
  const auto* in = static_cast<const unsigned char*>(staging.in(send, total * e));
  auto* out = static_cast<unsigned char*>(staging.out(recv, total * e, /*copy_in=*/false));
  if (count > 0) {
    const ncclDataType_t t = nccl_dtype(dtype);
    grouped(size_, [&](int r) {
      const ncclResult_t sent = ncclSend(in + size_t(r) * count * e, count, t, r, shared_->comm, s);
      return sent != ncclSuccess ? sent : ncclRecv(out + size_t(r) * count * e, count, t, r, shared_->comm, s);
    });
  }
  staging.finish();
  return end();
}

}  // namespace zt
