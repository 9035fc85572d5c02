// The data communicator of a synchronous backend: device buffers are host memory and every
// operation enqueued on a stream has run, so MPI moves the buffers in place and waiting for a
// collective on a stream is waiting for it on the host.
//
// make_data_comm, the choice among the data communicators, is here too.
#include "comm/data_comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/hier_comm.h"
#include "comm/staged_comm.h"
#include "core/error.h"
#include "core/log.h"
#if ZT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "comm/nccl_comm.h"
#endif

namespace zt {

namespace {

// ZT_TEST_INTER_NODE_GBPS (benchmarks of ZeRO++ on simulated nodes, tests/bench/bench_zeropp.sh):
// this rank's bytes across nodes are held to that many Gbit/s, one link per process shared by
// every data communicator and group: a collective completes no sooner than its bytes across
// nodes would have crossed the link, queued behind what this rank sent before. 0 (unset): off.
class InterNodeLink {
 public:
  static InterNodeLink& get() {
    static InterNodeLink link;
    return link;
  }
  bool throttled() const { return bytes_per_s_ > 0; }
  /// When `bytes` sent now would have crossed.
  std::chrono::steady_clock::time_point reserve(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    free_at_ = std::max(free_at_, now) +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(double(bytes) / bytes_per_s_));
    return free_at_;
  }

 private:
  InterNodeLink() {
    const char* env = std::getenv("ZT_TEST_INTER_NODE_GBPS");
    if (env == nullptr || *env == '\0') return;
    char* end = nullptr;
    const double gbps = std::strtod(env, &end);
    ZT_USAGE_CHECK(end != env && *end == '\0' && gbps > 0, "ZT_TEST_INTER_NODE_GBPS must be a positive number of "
                   "Gbit/s, got '", env, "'");
    bytes_per_s_ = gbps * 1e9 / 8;
  }
  double bytes_per_s_ = 0;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point free_at_{};
};

class DirectWork final : public DataWork {
 public:
  DirectWork(std::shared_ptr<Work> work, std::chrono::steady_clock::time_point done_at)
      : work_(std::move(work)), done_at_(done_at) {}
  void wait(Stream&) override { synchronize(); }
  void synchronize() override {
    work_->wait();
    std::this_thread::sleep_until(done_at_);  // the throttled link's time; the past when unthrottled
  }

 private:
  std::shared_ptr<Work> work_;
  std::chrono::steady_clock::time_point done_at_;
};

class DirectComm final : public DataComm {
 public:
  explicit DirectComm(HostComm& host) : host_(host) {}
  /// Over a communicator of its own (ShmComm), whose collectives it alone issues.
  explicit DirectComm(std::unique_ptr<HostComm> owned) : owned_(std::move(owned)), host_(*owned_) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string name() const override { return host_.name(); }
  size_t max_collective_elements() const override { return host_.max_collective_elements(); }

  std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream&) override {
    stats_.all_reduce += count * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kAllReduce, {count}, dtype_size(dtype)});
    const uint64_t in_place = host_.stats().in_place;
    auto work = host_.all_reduce(buffer, count, dtype);
    stats_.in_place += host_.stats().in_place - in_place;  // the host looks the buffer up
    return wrap(std::move(work), t);
  }
  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                           Stream&) override {
    for (size_t c : counts) stats_.reduce_scatter += c * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kReduceScatter, counts, dtype_size(dtype)});
    const uint64_t in_place = host_.stats().in_place;
    auto work = host_.reduce_scatter(send, recv, counts, dtype);
    stats_.in_place += host_.stats().in_place - in_place;
    return wrap(std::move(work), t);
  }
  std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                       Stream&) override {
    for (size_t c : counts) stats_.all_gather += c * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kAllGather, counts, dtype_size(dtype)});
    return wrap(host_.all_gather(send, recv, counts, dtype), t);
  }
  std::shared_ptr<DataWork> all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream&) override {
    stats_.all_to_all += count * size_t(size()) * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kAllToAll, {count}, dtype_size(dtype)});
    return wrap(host_.all_to_all(send, recv, count, dtype), t);
  }
  std::shared_ptr<DataWork> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                         const std::vector<size_t>& recv_counts, DType dtype, Stream&) override {
    for (size_t c : send_counts) stats_.all_to_all += c * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kAllToAll, send_counts, dtype_size(dtype), 0, recv_counts});
    return wrap(host_.all_to_all_v(send, send_counts, recv, recv_counts, dtype), t);
  }
  std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream&) override {
    stats_.broadcast += count * dtype_size(dtype);
    const Traffic t = count_traffic(host_, {Collective::kBroadcast, {count}, dtype_size(dtype), root});
    return wrap(host_.broadcast(buffer, count, dtype, root), t);
  }
  std::unique_ptr<SharedBuffer> allocate_shared(size_t bytes) override { return host_.allocate_shared(bytes); }
  std::vector<int> node_of_ranks() const override { return host_.node_of_ranks(); }

 protected:
  std::unique_ptr<DataComm> make_group(int color) override { return std::make_unique<DirectComm>(host_.split(color)); }

 private:
  std::shared_ptr<DataWork> wrap(std::shared_ptr<Work> work, const Traffic& t) {
    ++stats_.calls;
    InterNodeLink& link = InterNodeLink::get();
    const auto done_at = link.throttled() && t.inter_node.sent > 0 ? link.reserve(t.inter_node.sent)
                                                                    : std::chrono::steady_clock::time_point{};
    return std::make_shared<DirectWork>(std::move(work), done_at);
  }
  std::unique_ptr<HostComm> owned_;
  HostComm& host_;
};

}  // namespace

namespace {

// ZT_DATA_COMM: "" or "auto" (choose), "staged" or "nccl".
std::string data_comm_choice() {
  const char* value = std::getenv("ZT_DATA_COMM");
  const std::string choice = value ? value : "";
  ZT_USAGE_CHECK(choice.empty() || choice == "auto" || choice == "staged" || choice == "nccl",
                 "ZT_DATA_COMM must be auto, staged or nccl (got '", choice, "')");
  return choice == "auto" ? "" : choice;
}

#if ZT_HAVE_CUDA
// Why NCCL cannot serve these ranks ("" when it can): NCCL refuses two ranks on one GPU, so
// every rank's host and GPU (PCI bus id) are gathered over `control` and compared. The ranks'
// ZT_DATA_COMM travels with them, so that they all take the same decision or all refuse.
std::string gpu_shared_by_ranks(Backend& backend, HostComm& control, const std::string& choice) {
  struct Place {
    char host[256];
    char bus[64];
    char choice[16];
  };
  static_assert(sizeof(Place) % 2 == 0, "gathered as 16-bit elements");
  Place mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  std::strncpy(mine.bus, cuda::pci_bus_id(cuda::backend_device(backend)).c_str(), sizeof mine.bus - 1);
  std::strncpy(mine.choice, choice.c_str(), sizeof mine.choice - 1);
  std::vector<Place> all(size_t(control.size()));
  // Raw bytes as 16-bit elements: a gather moves them unchanged.
  control.all_gather(&mine, all.data(), std::vector<size_t>(all.size(), sizeof(Place) / 2), DType::kBF16)->wait();
  for (size_t i = 0; i < all.size(); ++i) {
    ZT_USAGE_CHECK(std::strcmp(all[i].choice, all[0].choice) == 0, "ZT_DATA_COMM differs between ranks: '",
                   all[0].choice, "' on rank 0, '", all[i].choice, "' on rank ", i);
    for (size_t j = 0; j < i; ++j) {
      if (std::strcmp(all[i].host, all[j].host) == 0 && std::strcmp(all[i].bus, all[j].bus) == 0) {
        return cat("ranks ", j, " and ", i, " share GPU ", all[i].bus, " on ", all[i].host,
                   ", and NCCL needs a GPU per rank");
      }
    }
  }
  return "";
}
#endif

}  // namespace

namespace {

// The host communicator that moves the data when the ranks ask for it (ZT_SHM_COLLECTIVES=1):
// ShmComm when every rank is on this node, HierComm across regular nodes; else `fallback`
// (control itself, or a duplicate of it).
template <typename Fallback>
std::unique_ptr<HostComm> data_host_comm(HostComm& control, Fallback fallback) {
  std::unique_ptr<HostComm> shm = make_shm_comm(control);
  // Said only when it is not the default: MPI's runs print what they always printed.
  if (shm && control.rank() == 0) {
    log_info("host collectives: ", shm->name() == "shm" ? "shared memory (one node, ZT_SHM_COLLECTIVES=1)"
                                                         : "shared memory in each node, MPI between nodes "
                                                           "(ZT_SHM_COLLECTIVES=1)");
  }
  return shm ? std::move(shm) : fallback();
}

}  // namespace

// Direct on a synchronous backend; on the CUDA backend NCCL, unless two ranks share a GPU or
// ZT_DATA_COMM=staged; staged on any other backend. ZT_DATA_COMM=nccl insists on NCCL. The
// host transport of direct and staged is ShmComm when every rank shares this node.
std::unique_ptr<DataComm> make_data_comm(Backend& backend, HostComm& control) {
  const std::string choice = data_comm_choice();
  const auto duplicate = [&] { return control.duplicate(); };
#if ZT_HAVE_CUDA
  if (backend.name() == "cuda") {
    const std::string shared = gpu_shared_by_ranks(backend, control, choice);
    ZT_USAGE_CHECK(choice != "nccl" || shared.empty(), "ZT_DATA_COMM=nccl: ", shared);
    if (choice == "staged" || !shared.empty()) {
      if (control.rank() == 0) {
        log_info("data communicator: mpi, staged through pinned memory (",
                 choice == "staged" ? std::string("ZT_DATA_COMM=staged") : shared, ")");
      }
      return make_staged_comm(backend, data_host_comm(control, duplicate));
    }
    return std::make_unique<NcclComm>(backend, control);
  }
  ZT_USAGE_CHECK(choice != "nccl", "ZT_DATA_COMM=nccl needs the cuda backend (this run's is ", backend.name(), ")");
#else
  ZT_USAGE_CHECK(choice != "nccl", "ZT_DATA_COMM=nccl: this zerotrain was built without CUDA and NCCL");
#endif
  if (backend.synchronous()) {
    std::unique_ptr<HostComm> shm = data_host_comm(control, [] { return std::unique_ptr<HostComm>(); });
    return shm ? std::make_unique<DirectComm>(std::move(shm)) : std::make_unique<DirectComm>(control);
  }
  return make_staged_comm(backend, data_host_comm(control, duplicate));
}

}  // namespace zt
