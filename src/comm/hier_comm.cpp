#include "comm/hier_comm.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <numeric>

#include "comm/block_offsets.h"
#include "comm/mpi_runtime.h"
#include "comm/node_layout.h"
#include "core/error.h"
#include "core/log.h"

namespace zt {

namespace {

// A communicator of `parent`'s ranks that share `color`, ordered by rank; the caller frees it.
MPI_Comm split_mpi(MPI_Comm parent, int color, int rank) {
  MPI_Comm out = MPI_COMM_NULL;
  ZT_MPI_CHECK(MPI_Comm_split(parent, color, rank, &out));
  return out;
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t(0)); }

}  // namespace

HierComm::HierComm(MPI_Comm parent, int ranks_per_node, size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &parent_));
  ZT_MPI_CHECK(MPI_Comm_rank(parent_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(parent_, &size_));
  ZT_CHECK(ranks_per_node >= 1 && size_ % ranks_per_node == 0, "HierComm: ", ranks_per_node,
           " ranks per node do not divide ", size_, " ranks");
  per_node_ = ranks_per_node;
  nodes_ = size_ / per_node_;
  local_ = rank_ % per_node_;
  world_ = std::make_unique<MpiComm>(parent_);
  MPI_Comm node = split_mpi(parent_, rank_ / per_node_, rank_);
  MPI_Comm across = split_mpi(parent_, local_, rank_);
  node_ = std::make_unique<ShmComm>(node, chunk_bytes_);  // each duplicates what it is given
  across_ = std::make_unique<MpiComm>(across);
  MPI_Comm_free(&node);
  MPI_Comm_free(&across);
}

HierComm::~HierComm() {
  queue_.stop();
  // The sub-communicators free their own duplicates (collectively, in the same order everywhere).
  across_.reset();
  node_.reset();
  world_.reset();
  if (MpiRuntime::initialized()) MPI_Comm_free(&parent_);
}

std::unique_ptr<HostComm> HierComm::duplicate() { return std::make_unique<HierComm>(parent_, per_node_, chunk_bytes_); }

void HierComm::regroup(const std::vector<size_t>& counts, size_t elem, const unsigned char* from, unsigned char* to,
                       bool into_groups) const {
  const std::vector<size_t> offsets = block_offsets(counts);
  size_t grouped = 0;  // bytes into the buffer in local-index order
  for (int l = 0; l < per_node_; ++l) {
    for (int n = 0; n < nodes_; ++n) {
      const size_t r = size_t(n * per_node_ + l), bytes = counts[r] * elem;
      if (bytes > 0) {  // an empty block's pointers may be null
        if (into_groups) std::memcpy(to + grouped, from + offsets[r] * elem, bytes);
        else std::memcpy(to + offsets[r] * elem, from + grouped, bytes);
      }
      grouped += bytes;
    }
  }
}

void HierComm::run_reduce_scatter(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                                  DType dtype) {
  const size_t e = dtype_size(dtype);
  const std::vector<size_t> group = group_counts(counts, per_node_);
  grouped_.resize(sum(counts) * e);
  regroup(counts, e, send, grouped_.data(), /*into_groups=*/true);
  partial_.resize(group[size_t(local_)] * e);
  node_->reduce_scatter(grouped_.data(), partial_.data(), group, dtype)->wait();
  across_->reduce_scatter(partial_.data(), recv, across_counts(counts, per_node_, local_), dtype)->wait();
}

void HierComm::run_all_gather(const unsigned char* send, unsigned char* recv, const std::vector<size_t>& counts,
                              DType dtype) {
  const size_t e = dtype_size(dtype);
  const std::vector<size_t> group = group_counts(counts, per_node_);
  // This local index's blocks from every node, then every local index's from this node.
  partial_.resize(group[size_t(local_)] * e);
  across_->all_gather(send, partial_.data(), across_counts(counts, per_node_, local_), dtype)->wait();
  grouped_.resize(sum(counts) * e);
  node_->all_gather(partial_.data(), grouped_.data(), group, dtype)->wait();
  regroup(counts, e, grouped_.data(), recv, /*into_groups=*/false);
}

void HierComm::run_all_reduce(unsigned char* buffer, size_t count, DType dtype) {
  const size_t e = dtype_size(dtype), l = size_t(per_node_);
  const std::vector<size_t> slices = even_blocks(count, l);
  partial_.resize(slices[size_t(local_)] * e);
  node_->reduce_scatter(buffer, partial_.data(), slices, dtype)->wait();
  across_->all_reduce(partial_.data(), slices[size_t(local_)], dtype)->wait();
  node_->all_gather(partial_.data(), buffer, slices, dtype)->wait();
}

std::shared_ptr<Work> HierComm::all_reduce(void* buffer, size_t count, DType dtype) {
  stats_.all_reduce += count * dtype_size(dtype);
  ++stats_.calls;
  auto* bytes = static_cast<unsigned char*>(buffer);
  return queue_.enqueue([=, this] { run_all_reduce(bytes, count, dtype); });
}

std::shared_ptr<Work> HierComm::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                               DType dtype) {
  ZT_CHECK(int(recv_counts.size()) == size_, "reduce_scatter needs one count per rank");
  stats_.reduce_scatter += sum(recv_counts) * dtype_size(dtype);
  ++stats_.calls;
  auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  return queue_.enqueue([=, this, counts = recv_counts] { run_reduce_scatter(s, r, counts, dtype); });
}

std::shared_ptr<Work> HierComm::all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                                           DType dtype) {
  ZT_CHECK(int(counts.size()) == size_, "all_gather needs one count per rank");
  stats_.all_gather += sum(counts) * dtype_size(dtype);
  ++stats_.calls;
  auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  return queue_.enqueue([=, this, counts = counts] { run_all_gather(s, r, counts, dtype); });
}

std::shared_ptr<Work> HierComm::broadcast(void* buffer, size_t count, DType dtype, int root) {
  stats_.broadcast += count * dtype_size(dtype);
  ++stats_.calls;
  return queue_.enqueue([=, this] { world_->broadcast(buffer, count, dtype, root)->wait(); });
}

std::shared_ptr<Work> HierComm::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  stats_.all_to_all += count * size_t(size_) * dtype_size(dtype);
  ++stats_.calls;
  return queue_.enqueue([=, this] { world_->all_to_all(send, recv, count, dtype)->wait(); });
}

std::shared_ptr<Work> HierComm::barrier() {
  ++stats_.calls;
  return queue_.enqueue([this] { world_->barrier()->wait(); });
}

std::shared_ptr<Work> HierComm::all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                             const std::vector<size_t>& recv_counts, DType dtype) {
  stats_.all_to_all += sum(send_counts) * dtype_size(dtype);
  ++stats_.calls;
  return queue_.enqueue(
      [=, this] { world_->all_to_all_v(send, send_counts, recv, recv_counts, dtype)->wait(); });
}

std::unique_ptr<HostComm> HierComm::split(int color) {
  ColorSplit s = split_by_color(parent_, color);
  const int members = int(s.members.size());
  std::vector<int> nodes;
  for (int r : s.members) nodes.push_back(r / per_node_);
  const NodeCounts c = count_nodes(nodes);
  // HierComm's layout: nodes of equal size whose members are consecutive in the group.
  bool blocks = c.fewest == c.most;
  for (int i = 0; i < members && blocks; ++i) blocks = nodes[size_t(i)] == nodes[size_t(i / c.most * c.most)];
  std::unique_ptr<HostComm> out;
  if (c.nodes == 1 && members > 1) {
    out = std::make_unique<ShmComm>(s.comm, chunk_bytes_);
  } else if (c.nodes > 1 && c.most > 1 && blocks) {
    out = std::make_unique<HierComm>(s.comm, c.most, chunk_bytes_);
  } else {
    out = std::make_unique<MpiComm>(s.comm, std::move(nodes));
  }
  MPI_Comm_free(&s.comm);
  return out;
}

void HierComm::all_reduce_doubles(std::vector<double>& values, bool max) {
  queue_.enqueue([&, this] { world_->all_reduce_doubles(values, max); })->wait();
}

namespace {

// ZT_SHM_NODE_SIZE=N (with ZT_SHM_COLLECTIVES=1; for tests and measurements on one machine): every
// N consecutive ranks form a node, so the hierarchical path runs on one machine. 0 when unset.
int simulated_node_size(MpiComm& control, bool wanted) {
  const char* env = std::getenv("ZT_SHM_NODE_SIZE");
  int n = 0;  // unset; -1: not a divisor of the world size
  if (env != nullptr && wanted) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    n = end != env && *end == '\0' && v >= 1 && control.size() % v == 0 ? int(v) : -1;
  }
  // Every rank learns what every other has before any refuses: none is left waiting.
  int agree[2] = {n, -n};
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_INT, MPI_MIN, control.mpi_comm()));
  ZT_USAGE_CHECK(agree[0] != -1, "ZT_SHM_NODE_SIZE: must be a number of ranks that divides the ", control.size(),
                 " ranks; got '", env ? env : "", "'", n == -1 ? "" : " here, another on some rank");
  ZT_USAGE_CHECK(agree[0] == -agree[1], "ZT_SHM_NODE_SIZE differs between the ranks (give it to all: mpirun -x)");
  return n;
}

}  // namespace

std::unique_ptr<HostComm> make_shm_comm(HostComm& control) {
  auto* mpi = dynamic_cast<MpiComm*>(&control);
  if (mpi == nullptr || control.size() == 1) return nullptr;  // the same on every rank
  // Opt-in until a quiet benchmark shows the engine's steps gain (issue 17): under load its
  // ZeRO-2/3 overhead measured worse than MPI's.
  const char* env = std::getenv("ZT_SHM_COLLECTIVES");
  const bool wanted = env != nullptr && std::string(env) == "1";
  const int simulated = simulated_node_size(*mpi, wanted);
  if (simulated > 0) return std::make_unique<HierComm>(mpi->mpi_comm(), simulated);
  int everywhere = wanted ? 1 : 0;  // the same answer on every rank
  ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, mpi->mpi_comm()));
  if (everywhere == 0) return nullptr;
  const NodeLayout layout = node_layout(mpi->mpi_comm());
  if (layout.one_node) return std::make_unique<ShmComm>(mpi->mpi_comm());
  if (layout.ranks_per_node == 0) {
    if (control.rank() == 0) {
      log_warn("ZT_SHM_COLLECTIVES=1: the ranks are not in nodes of equal size with consecutive ranks "
               "(mpirun --map-by slot, srun --distribution=block), so collectives stay with MPI");
    }
    return nullptr;
  }
  return std::make_unique<HierComm>(mpi->mpi_comm(), layout.ranks_per_node);
}

}  // namespace zt
