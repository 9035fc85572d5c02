// The data communicator on the CUDA backend against sums computed on the host: the one
// make_data_comm picks (nccl when every rank has a GPU of its own, staged through pinned memory
// when ranks share one, as 2 ranks on a one-GPU machine do), and NcclComm itself where NCCL can
// serve. all_reduce, reduce_scatter and all_gather with even and uneven counts (a 0 among them),
// all_gather in place, broadcast; fp32, bf16 and fp16 on small integers, whose sums are exact in
// every one of them, so results compare exactly. And a collective enqueued right behind kernels on
// the compute stream, which must see what they wrote.
//
// Every rank runs every collective: checks are EXPECTs, never an early return that would leave the
// other ranks waiting in the next collective.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_comm.h"
#include "core/dtype.h"

namespace zt {
namespace {

// Why NCCL cannot serve these ranks, found here with MPI directly (not through the code under
// test): "" when every rank has a GPU of its own.
std::string shared_gpu_reason(int device) {
  struct Place {
    char host[256];
    char bus[64];
  };
  Place mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  std::strncpy(mine.bus, cuda::pci_bus_id(device).c_str(), sizeof mine.bus - 1);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<Place> all(size_t(size), Place{});
  MPI_Allgather(&mine, sizeof(Place), MPI_BYTE, all.data(), sizeof(Place), MPI_BYTE, MPI_COMM_WORLD);
  for (int i = 0; i < size; ++i) {
    for (int j = 0; j < i; ++j) {
      if (std::strcmp(all[size_t(i)].host, all[size_t(j)].host) == 0 &&
          std::strcmp(all[size_t(i)].bus, all[size_t(j)].bus) == 0) {
        return cat("ranks ", j, " and ", i, " share GPU ", all[size_t(i)].bus, " on ", all[size_t(i)].host);
      }
    }
  }
  return "";
}

// One backend per rank on its node-local GPU (modulo the GPUs: ranks beyond them share), the MPI
// control communicator, and the data communicator make_data_comm picks; made once for all cases
// and released before MPI_Finalize.
class World : public ::testing::Environment {
 public:
  void SetUp() override {
    backend = cuda::make_cuda_backend(node_local_rank() % cuda::device_count());
    control = std::make_unique<MpiComm>(MPI_COMM_WORLD);
    shared = shared_gpu_reason(cuda::backend_device(*backend));
    data = make_data_comm(*backend, *control);
  }
  void TearDown() override {
    data.reset();
    control.reset();
    backend.reset();
  }
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MpiComm> control;
  std::unique_ptr<DataComm> data;
  std::string shared;
};

World* const g_world = static_cast<World*>(::testing::AddGlobalTestEnvironment(new World));

// Rank r's i-th element: a small integer, so that sums over any world up to 36 ranks are exact
// in bf16 (8 significant bits) and fp16 as well as fp32.
float value(int rank, size_t i) { return float((size_t(rank) * 3 + i) % 8); }

std::vector<unsigned char> encode(const std::vector<float>& v, DType t) {
  std::vector<unsigned char> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t bits = t == DType::kBF16 ? to_bf16(v[i]).bits : to_fp16(v[i]).bits;
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<unsigned char>& bytes, DType t) {
  std::vector<float> out(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = t == DType::kBF16 ? to_float(bf16{bits}) : to_float(fp16{bits});
    }
  }
  return out;
}

// A buffer of `n` elements of `t` in `pool` (device memory unless the test says otherwise),
// filled from the host.
struct Buffer {
  Buffer(Backend& backend, size_t n, DType t, Pool pool = Pool::kDevice)
      : dtype(t), count(n), bytes(backend, n * dtype_size(t) + 1, pool) {}
  void upload(Backend& backend, const std::vector<float>& v, size_t at = 0) {
    const auto b = encode(v, dtype);
    backend.copy_from_host(bytes.data() + at * dtype_size(dtype), b.data(), b.size());
  }
  std::vector<float> download(Backend& backend, size_t at, size_t n) {
    std::vector<unsigned char> b(n * dtype_size(dtype));
    backend.copy_to_host(b.data(), bytes.data() + at * dtype_size(dtype), b.size());
    return decode(b, dtype);
  }
  unsigned char* at(size_t i) { return bytes.data() + i * dtype_size(dtype); }
  DType dtype;
  size_t count;
  DeviceArray<unsigned char> bytes;  // one spare byte: a 0-element buffer still has an address
};

std::vector<size_t> exclusive_sums(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), d.begin(), size_t(0));
  return d;
}

// The count patterns, one per rank: even, uneven with a rank of 0 (every other rank), uneven
// without a 0.
std::vector<std::vector<size_t>> count_patterns(int world) {
  const size_t n = size_t(world);
  std::vector<size_t> even(n, 257), with_zero(n), uneven(n);
  for (int r = 0; r < world; ++r) {
    with_zero[size_t(r)] = r % 2 == 1 ? 0 : 300 + 17 * size_t(r);
    uneven[size_t(r)] = 100 + 29 * size_t(r);
  }
  return {even, with_zero, uneven};
}

std::string describe(const std::vector<size_t>& counts) {
  std::string s = "counts {";
  for (size_t i = 0; i < counts.size(); ++i) s += cat(i ? "," : "", counts[i]);
  return s + "}";
}

// Waits for `work` one way or the other: the compute stream waits (and the host synchronises it),
// or the host synchronises the collective itself.
void finish(Backend& backend, DataWork& work, bool host_wait) {
  if (host_wait) {
    work.synchronize();
  } else {
    work.wait(backend.compute_stream());
    backend.synchronize(backend.compute_stream());
  }
}

void check_all_reduce(Backend& backend, DataComm& comm, DType t, Pool pool = Pool::kDevice) {
  const int me = comm.rank(), n = comm.size();
  const size_t count = 1031;
  std::vector<float> mine(count), want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = value(me, i);
    for (int r = 0; r < n; ++r) want[i] += value(r, i);
  }
  Buffer buf(backend, count, t, pool);
  buf.upload(backend, mine);
  const uint64_t before = comm.stats().all_reduce;
  finish(backend, *comm.all_reduce(buf.at(0), count, t, backend.compute_stream()), false);
  EXPECT_EQ(buf.download(backend, 0, count), want) << comm.name() << " all_reduce " << dtype_name(t) << " in "
                                                  << pool_name(pool) << " memory";
  EXPECT_EQ(comm.stats().all_reduce - before, count * dtype_size(t));
}

void check_reduce_scatter(Backend& backend, DataComm& comm, DType t) {
  const int me = comm.rank(), n = comm.size();
  for (const auto& counts : count_patterns(n)) {
    const auto displ = exclusive_sums(counts);
    const size_t total = displ.back() + counts.back(), mine_n = counts[size_t(me)];
    std::vector<float> send(total), want(mine_n, 0.0f);
    for (size_t i = 0; i < total; ++i) send[i] = value(me, i);
    for (size_t j = 0; j < mine_n; ++j) {
      for (int r = 0; r < n; ++r) want[j] += value(r, displ[size_t(me)] + j);
    }
    Buffer s(backend, total, t), recv(backend, mine_n, t);
    s.upload(backend, send);
    finish(backend, *comm.reduce_scatter(s.at(0), recv.at(0), counts, t, backend.compute_stream()), true);
    EXPECT_EQ(recv.download(backend, 0, mine_n), want)
        << comm.name() << " reduce_scatter " << dtype_name(t) << " " << describe(counts);
  }
}

void check_all_gather(Backend& backend, DataComm& comm, DType t, Pool pool = Pool::kDevice) {
  const int me = comm.rank(), n = comm.size();
  for (const auto& counts : count_patterns(n)) {
    const auto displ = exclusive_sums(counts);
    const size_t total = displ.back() + counts.back(), mine_n = counts[size_t(me)];
    std::vector<float> mine(mine_n), want(total);
    for (size_t j = 0; j < mine_n; ++j) mine[j] = value(me, j);
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < counts[size_t(r)]; ++j) want[displ[size_t(r)] + j] = value(r, j);
    }
    for (const bool in_place : {false, true}) {
      Buffer recv(backend, total, t, pool), send(backend, mine_n, t, pool);
      recv.upload(backend, std::vector<float>(total, 99.0f));  // what must be overwritten
      const void* from = send.at(0);
      if (in_place) {
        recv.upload(backend, mine, displ[size_t(me)]);
        from = recv.at(displ[size_t(me)]);
      } else {
        send.upload(backend, mine);
      }
      finish(backend, *comm.all_gather(from, recv.at(0), counts, t, backend.compute_stream()), in_place);
      EXPECT_EQ(recv.download(backend, 0, total), want) << comm.name() << " all_gather " << dtype_name(t) << " "
                                                        << describe(counts) << (in_place ? " in place" : "")
                                                        << " in " << pool_name(pool) << " memory";
    }
  }
}

void check_broadcast(Backend& backend, DataComm& comm, DType t) {
  const int me = comm.rank(), root = comm.size() - 1;
  const size_t count = 777;
  std::vector<float> mine(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = value(me, i);
    want[i] = value(root, i);
  }
  Buffer buf(backend, count, t);
  buf.upload(backend, mine);
  finish(backend, *comm.broadcast(buf.at(0), count, t, root, backend.compute_stream()), false);
  EXPECT_EQ(buf.download(backend, 0, count), want) << comm.name() << " broadcast from " << root << " " << dtype_name(t);
}

// The collective reads what the compute stream wrote just before it, with no host synchronise in
// between: a long queue of casts, the last of which writes the send buffer (its old contents are
// 99s); and the compute stream reads the sum only after DataWork::wait.
void check_ordering(Backend& backend, DataComm& comm) {
  const int me = comm.rank(), n = comm.size();
  const size_t count = size_t(1) << 24;
  std::vector<float> mine(count), want(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = value(me, i);
    for (int r = 0; r < n; ++r) want[i] += value(r, i);
  }
  Buffer src(backend, count, DType::kF32), send(backend, count, DType::kBF16), busy(backend, count, DType::kBF16),
      out(backend, count, DType::kF32);
  src.upload(backend, mine);
  send.upload(backend, std::vector<float>(count, 99.0f));
  Stream& compute = backend.compute_stream();
  for (int k = 0; k < 50; ++k) backend.cast_async(src.at(0), DType::kF32, busy.at(0), DType::kBF16, count, compute);
  backend.cast_async(src.at(0), DType::kF32, send.at(0), DType::kBF16, count, compute);
  auto work = comm.all_reduce(send.at(0), count, DType::kBF16, compute);
  work->wait(compute);
  backend.cast_async(send.at(0), DType::kBF16, out.at(0), DType::kF32, count, compute);
  backend.synchronize(compute);
  const std::vector<float> got = out.download(backend, 0, count);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0u) << comm.name() << ": the all-reduce did not see the cast before it, or the cast after "
                       << "it ran before it ended (first: got " << got[0] << ", want " << want[0] << ")";
}

void check_everything(Backend& backend, DataComm& comm) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    check_all_reduce(backend, comm, t);
    check_reduce_scatter(backend, comm, t);
    check_all_gather(backend, comm, t);
    check_broadcast(backend, comm, t);
  }
  check_ordering(backend, comm);
}

TEST(DataCommOnCuda, MakeDataCommPicksNcclUnlessRanksShareAGpu) {
  const std::string name = g_world->data->name();
  if (g_world->shared.empty()) {
    EXPECT_EQ(name, "nccl");
  } else {
    EXPECT_NE(name.find("staged"), std::string::npos) << name << " (" << g_world->shared << ")";
  }
  EXPECT_EQ(g_world->data->rank(), g_world->control->rank());
  EXPECT_EQ(g_world->data->size(), g_world->control->size());
}

class PickedComm : public ::testing::TestWithParam<DType> {};

TEST_P(PickedComm, AllReduce) { check_all_reduce(*g_world->backend, *g_world->data, GetParam()); }
TEST_P(PickedComm, ReduceScatterEvenAndUneven) { check_reduce_scatter(*g_world->backend, *g_world->data, GetParam()); }
TEST_P(PickedComm, AllGatherEvenUnevenAndInPlace) { check_all_gather(*g_world->backend, *g_world->data, GetParam()); }
TEST_P(PickedComm, Broadcast) { check_broadcast(*g_world->backend, *g_world->data, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Dtypes, PickedComm, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The engine also hands collectives host memory (the master weights gathered for a checkpoint, an
// offloaded partition): NcclComm stages it through the device, the staged communicator copies it.
TEST(DataCommOnCuda, HostAndPinnedBuffers) {
  for (Pool pool : {Pool::kHost, Pool::kPinned}) {
    check_all_reduce(*g_world->backend, *g_world->data, DType::kF32, pool);
    check_all_gather(*g_world->backend, *g_world->data, DType::kBF16, pool);
  }
}

TEST(DataCommOnCuda, CollectiveAfterComputeKernelsSeesTheirResult) {
  check_ordering(*g_world->backend, *g_world->data);
}

// NcclComm built directly, whatever make_data_comm picked; only where NCCL can serve (a GPU per
// rank): every rank reaches the same verdict from the same gathered places.
TEST(NcclComm, EveryCollectiveAndDtype) {
  if (!g_world->shared.empty()) {
    const std::string why = "NCCL needs a GPU per rank and " + g_world->shared;
    if (g_world->control->rank() == 0) std::printf("skipped: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  NcclComm comm(*g_world->backend, *g_world->control);
  EXPECT_EQ(comm.name(), "nccl");
  check_everything(*g_world->backend, comm);
  EXPECT_GT(comm.stats().calls, 0u);
}

}  // namespace
}  // namespace zt
