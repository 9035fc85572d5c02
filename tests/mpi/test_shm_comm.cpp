// ShmComm (comm/shm_comm.h) and HierComm (comm/hier_comm.h, over simulated nodes) against a
// reference computed here in their order of summation, and against MpiComm:
// every collective, every dtype, uneven and zero counts, and messages of many steps (a small
// staging buffer makes a few thousand elements cross dozens of chunks).
#include "comm/node_layout.h"
#include "comm/shm_comm.h"
#include "comm/hier_comm.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Raw element storage for any dtype, filled from floats.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;
  Buffer(DType t, size_t n) : dtype(t), bytes(n * dtype_size(t)) {}
  size_t size() const { return bytes.size() / dtype_size(dtype); }
  void* data() { return bytes.data(); }
  float get(size_t i) const {
    float f;
    convert(bytes.data() + i * dtype_size(dtype), dtype, &f, DType::kF32, 1);
    return f;
  }
  void set(size_t i, float f) { convert(&f, DType::kF32, bytes.data() + i * dtype_size(dtype), dtype, 1); }
  uint32_t bits(size_t i) const {
    uint32_t u = 0;
    std::memcpy(&u, bytes.data() + i * dtype_size(dtype), dtype_size(dtype));
    return u;
  }
};

// Rank r's value at i: irregular, so that sums round differently in different orders. One copy
// of the code (noinline), so that every caller gets the same bits whatever the compiler contracts.
__attribute__((noinline)) float value(int rank, size_t i) {
  return std::sin(float(i) * 0.37f + float(rank) * 1.3f) * (1.0f + float((i * 7 + size_t(rank)) % 13)) / 3.0f;
}

Buffer input(DType dtype, int rank, size_t n) {
  Buffer b(dtype, n);
  for (size_t i = 0; i < n; ++i) b.set(i, value(rank, i));
  return b;
}

// The sum in rank order, rounded to the dtype after every addition (ShmComm's definition).
float reference_sum(DType dtype, size_t i, int ranks) {
  Buffer acc(dtype, 1), x(dtype, 1);
  acc.set(0, value(0, i));
  for (int r = 1; r < ranks; ++r) {
    x.set(0, value(r, i));  // the input as the dtype holds it
    acc.set(0, acc.get(0) + x.get(0));
  }
  return acc.get(0);
}

// Reference sums of n elements, computed once per (dtype, n): with `nodes` nodes of consecutive
// ranks, each node's sum in rank order, then the nodes' sums in node order (HierComm's order; with
// one node ShmComm's), rounded to the dtype after every addition.
Buffer reference(DType dtype, size_t n, int ranks, int nodes = 1) {
  std::vector<Buffer> in;
  for (int r = 0; r < ranks; ++r) in.push_back(input(dtype, r, n));
  const int per_node = ranks / nodes;
  Buffer out(dtype, n), node(dtype, 1);
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < nodes; ++k) {
      node.set(0, in[size_t(k * per_node)].get(i));
      for (int r = k * per_node + 1; r < (k + 1) * per_node; ++r) node.set(0, node.get(0) + in[size_t(r)].get(i));
      out.set(i, k == 0 ? node.get(0) : out.get(i) + node.get(0));
    }
  }
  return out;
}

std::vector<std::vector<size_t>> count_sets(int p) {
  std::vector<std::vector<size_t>> sets;
  sets.push_back(std::vector<size_t>(size_t(p), 1000));  // even
  std::vector<size_t> uneven, zeros, one;
  for (int r = 0; r < p; ++r) {
    uneven.push_back(size_t(37 * r + 5 + (r % 2) * 4000));  // some cross many small chunks
    zeros.push_back(r % 2 == 0 ? 0 : 2345);
    one.push_back(r == p - 1 ? 3 : 0);
  }
  sets.push_back(uneven);
  sets.push_back(zeros);
  sets.push_back(one);
  sets.push_back(std::vector<size_t>(size_t(p), 0));  // nothing at all
  return sets;
}

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// check(dtype, counts, total, at) for every dtype and count set; `at` is where rank `me`'s block
// starts in the concatenation of all `total` elements.
template <typename Check>
void for_each_case(int me, int p, Check check) {
  for (DType dtype : kDtypes) {
    for (const auto& counts : count_sets(p)) {
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
      check(dtype, counts, total, std::accumulate(counts.begin(), counts.begin() + me, size_t(0)));
    }
  }
}

// A communicator under test: ShmComm (nodes 0), or HierComm over `nodes` nodes of consecutive
// ranks (simulated on this machine: each "node" is a ShmComm, the nodes talk over MPI), with
// `staging` bytes of shared-memory staging per rank and buffer, and outputs of `stream_from`
// bytes or more written with non-temporal stores (0: all of them, at every alignment).
struct CommCase {
  size_t staging;
  int nodes;
  size_t stream_from = kShmStreamFromBytes;
};
// HierComm's nodes at this world size: `nodes` where they divide it, else one.
int nodes_at(const CommCase& c, int p) { return c.nodes > 0 && p % c.nodes == 0 ? c.nodes : 1; }
std::unique_ptr<HostComm> make_comm(const CommCase& c) {
  if (c.nodes == 0) return std::make_unique<ShmComm>(MPI_COMM_WORLD, c.staging, c.stream_from);
  return std::make_unique<HierComm>(MPI_COMM_WORLD, world_size() / nodes_at(c, world_size()), c.staging);
}

class ShmCommTest : public ::testing::TestWithParam<CommCase> {
 protected:
  std::unique_ptr<HostComm> comm_ptr = make_comm(GetParam());
  HostComm& comm = *comm_ptr;
  const int nodes = nodes_at(GetParam(), world_size());
};

TEST_P(ShmCommTest, ReduceScatterMatchesRankOrderSum) {
  const int me = comm.rank(), p = comm.size();
  for_each_case(me, p, [&](DType dtype, const std::vector<size_t>& counts, size_t total, size_t at) {
    Buffer send = input(dtype, me, total), recv(dtype, counts[size_t(me)]);
    const Buffer want = reference(dtype, total, p, nodes);
    comm.reduce_scatter(send.data(), recv.data(), counts, dtype)->wait();
    for (size_t i = 0; i < recv.size(); ++i) {
      ASSERT_EQ(recv.bits(i), want.bits(at + i)) << dtype_name(dtype) << " element " << at + i;
    }
  });
}

TEST_P(ShmCommTest, AllGatherConcatenatesInRankOrder) {
  const int me = comm.rank(), p = comm.size();
  for_each_case(me, p, [&](DType dtype, const std::vector<size_t>& counts, size_t total, size_t at) {
    for (bool in_place : {false, true}) {
      Buffer recv(dtype, total), send = input(dtype, me, counts[size_t(me)]);
      const void* from = send.data();
      if (in_place && total > 0) {
        std::copy(send.bytes.begin(), send.bytes.end(), recv.bytes.begin() + std::ptrdiff_t(at * dtype_size(dtype)));
        from = recv.bytes.data() + at * dtype_size(dtype);
      }
      comm.all_gather(from, recv.data(), counts, dtype)->wait();
      size_t offset = 0;
      for (int r = 0; r < p; ++r) {
        const Buffer theirs = input(dtype, r, counts[size_t(r)]);
        for (size_t i = 0; i < theirs.size(); ++i) ASSERT_EQ(recv.bits(offset + i), theirs.bits(i));
        offset += counts[size_t(r)];
      }
    }
  });
}

TEST_P(ShmCommTest, AllReduceMatchesRankOrderSum) {
  for (DType dtype : kDtypes) {
    for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(1000), size_t(12345)}) {
      Buffer buf = input(dtype, comm.rank(), n);
      const Buffer want = reference(dtype, n, comm.size(), nodes);
      comm.all_reduce(buf.data(), n, dtype)->wait();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf.bits(i), want.bits(i)) << dtype_name(dtype) << " n " << n << " i " << i;
    }
  }
}

TEST_P(ShmCommTest, BroadcastBarrierAndDoubles) {
  const int p = comm.size();
  for (int root = 0; root < p; ++root) {
    Buffer buf = input(DType::kBF16, comm.rank(), 9000);
    comm.broadcast(buf.data(), buf.size(), DType::kBF16, root)->wait();
    const Buffer want = input(DType::kBF16, root, 9000);
    ASSERT_EQ(buf.bytes, want.bytes) << "root " << root;
  }
  comm.barrier()->wait();
  std::vector<double> v(3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(value(comm.rank(), i));
  std::vector<double> m = v;
  comm.all_reduce_doubles(v, false);
  comm.all_reduce_doubles(m, true);
  for (size_t i = 0; i < v.size(); ++i) {
    double sum = 0, max = 0;
    for (int r = 0; r < p; ++r) {
      sum = r == 0 ? double(value(r, i)) : sum + double(value(r, i));
      max = r == 0 ? double(value(r, i)) : std::max(max, double(value(r, i)));
    }
    ASSERT_EQ(v[i], sum);
    ASSERT_EQ(m[i], max);
  }
}

// Block q of rank r's input goes to rank q, at r's place: the same through this communicator and
// MpiComm, blocks of 0, 1, odd and many-chunk sizes, bytes and wider elements.
TEST_P(ShmCommTest, AllToAllDeliversEachBlockToItsRank) {
  const int me = comm.rank(), p = comm.size();
  MpiComm mpi(MPI_COMM_WORLD);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(1000), size_t(9001)}) {
      // Rank r's block for q is input(r * p + q): every block differs.
      auto block = [&](int from, int to) { return input(dtype, from * p + to, count); };
      Buffer send(dtype, count * size_t(p));
      for (int q = 0; q < p; ++q) {
        const Buffer b = block(me, q);
        std::copy(b.bytes.begin(), b.bytes.end(), send.bytes.begin() + std::ptrdiff_t(size_t(q) * b.bytes.size()));
      }
      for (HostComm* c : {&comm, static_cast<HostComm*>(&mpi)}) {
        Buffer recv(dtype, count * size_t(p));
        c->all_to_all(send.data(), recv.data(), count, dtype)->wait();
        for (int r = 0; r < p; ++r) {
          const Buffer want = block(r, me);
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(recv.bits(size_t(r) * count + i), want.bits(i))
                << c->name() << " " << dtype_name(dtype) << " count " << count << " from rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

// Several collectives in flight at once, waited for in reverse: each completes in issue order.
TEST_P(ShmCommTest, AsyncCollectivesInFlight) {
  const int p = comm.size();
  const size_t n = 5000;
  std::vector<Buffer> bufs;
  for (int k = 0; k < 4; ++k) bufs.push_back(input(DType::kF32, comm.rank(), n));
  std::vector<std::shared_ptr<Work>> works;
  for (auto& b : bufs) works.push_back(comm.all_reduce(b.data(), n, DType::kF32));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  const Buffer want = reference(DType::kF32, n, p, nodes);
  for (auto& b : bufs) ASSERT_EQ(b.bytes, want.bytes);
}

// Against MpiComm: the same bits at 2 ranks for every dtype (a sum of two is the same in either
// order); beyond, MPI's own order may round differently in the last place.
TEST_P(ShmCommTest, AgreesWithMpiComm) {
  HostComm& shm = comm;
  MpiComm mpi(MPI_COMM_WORLD);
  const int p = shm.size();
  for (DType dtype : kDtypes) {
    const size_t n = 20000;
    Buffer a = input(dtype, shm.rank(), n), b = a;
    shm.all_reduce(a.data(), n, dtype)->wait();
    mpi.all_reduce(b.data(), n, dtype)->wait();
    const std::vector<size_t> counts(size_t(p), n / size_t(p));
    Buffer ra(dtype, n / size_t(p)), rb(dtype, n / size_t(p));
    Buffer send = input(dtype, shm.rank(), counts[0] * size_t(p));
    shm.reduce_scatter(send.data(), ra.data(), counts, dtype)->wait();
    mpi.reduce_scatter(send.data(), rb.data(), counts, dtype)->wait();
    // Inputs are below 5 in magnitude and partial sums below 20: three roundings of a 16-bit sum
    // in another order differ by at most a few of its units in the last place (0.0625 for bf16).
    const float tol = dtype == DType::kF32 ? 1e-5f : dtype == DType::kBF16 ? 0.2f : 0.02f;
    for (size_t i = 0; i < n; ++i) {
      if (p <= 2) {
        ASSERT_EQ(a.bits(i), b.bits(i)) << dtype_name(dtype) << " " << i;
      } else {
        ASSERT_NEAR(a.get(i), b.get(i), tol) << dtype_name(dtype) << " " << i;
      }
    }
    for (size_t i = 0; i < ra.size(); ++i) {
      if (p <= 2) {
        ASSERT_EQ(ra.bits(i), rb.bits(i)) << dtype_name(dtype) << " " << i;
      } else {
        ASSERT_NEAR(ra.get(i), rb.get(i), tol);
      }
    }
  }
}

// 4 KiB of staging: a few thousand elements take dozens of steps; 2 MiB: the default.
// HierComm over two simulated nodes (where the world size is even): 1 rank each at 2 ranks, 2 each
// at 4.
INSTANTIATE_TEST_SUITE_P(Staging, ShmCommTest,
                         ::testing::Values(CommCase{4096, 0}, CommCase{kShmChunkBytes, 0}, CommCase{4096, 0, 0},
                                           CommCase{kShmChunkBytes, 0, 0}, CommCase{4096, 2},
                                           CommCase{kShmChunkBytes, 2}),
                         [](const ::testing::TestParamInfo<CommCase>& info) {
                           return std::string(info.param.nodes ? "hier" : "shm") + "_" +
                                  std::to_string(info.param.staging) +
                                  (info.param.stream_from == 0 ? "_streamed" : "");
                         });

// A message of several default chunks, fp32 and bf16, with the default stores and streamed.
// Mismatches are counted, not asserted at once: every rank runs every collective whatever it
// finds, so a wrong result fails the test instead of leaving a peer waiting.
void check_many_chunks(size_t stream_from) {
  ShmComm comm(MPI_COMM_WORLD, kShmChunkBytes, stream_from);
  const int p = comm.size();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t n = 3 * kShmChunkBytes / dtype_size(dtype) + 777;
    // Every 997th element and the last few (a streamed copy's unaligned tail).
    auto wrong = [&](const Buffer& got, size_t at) {
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); i = i + 997 < got.size() - 8 ? i + 997 : i + 1) {
        bad += got.get(i) != reference_sum(dtype, at + i, p);
      }
      return bad;
    };
    Buffer buf = input(dtype, comm.rank(), n);
    comm.all_reduce(buf.data(), n, dtype)->wait();
    EXPECT_EQ(wrong(buf, 0), 0u) << "all-reduce, " << dtype_name(dtype);
    std::vector<size_t> counts(size_t(p), n / size_t(p));
    counts.back() += n % size_t(p);
    Buffer send = input(dtype, comm.rank(), n), recv(dtype, counts[size_t(comm.rank())]);
    comm.reduce_scatter(send.data(), recv.data(), counts, dtype)->wait();
    EXPECT_EQ(wrong(recv, size_t(comm.rank()) * (n / size_t(p))), 0u) << "reduce-scatter, " << dtype_name(dtype);
    // The blocks of sums, gathered: every rank's sums in rank order.
    Buffer gathered(dtype, n);
    comm.all_gather(recv.data(), gathered.data(), counts, dtype)->wait();
    EXPECT_EQ(wrong(gathered, 0), 0u) << "all-gather, " << dtype_name(dtype);
  }
  EXPECT_EQ(world_size(), p);
  EXPECT_EQ(world_rank(), comm.rank());
}

TEST(ShmCommLarge, ManyChunks) { check_many_chunks(kShmStreamFromBytes); }
TEST(ShmCommLarge, ManyChunksStreamed) { check_many_chunks(0); }

// Buffers in shared memory (allocate_shared): the all-reduce and reduce-scatter read every rank's
// buffer in place, and give the staged path's bits (the rank-order sum) for every dtype and count
// set, at an offset inside the allocation that differs between ranks; with outputs streamed or
// not. Each rank overwrites its buffers the moment its collective returns: a rank that returned
// while a peer still read them would spoil that peer's result. Mismatches are counted (every rank
// runs every collective).
void check_in_place(size_t stream_from) {
  ShmComm comm(MPI_COMM_WORLD, 4096, stream_from);
  const int me = comm.rank(), p = comm.size();
  size_t wrong = 0, cases = 0;
  for_each_case(me, p, [&](DType dtype, const std::vector<size_t>& counts, size_t total, size_t at) {
    const size_t e = dtype_size(dtype), lead = 3 + 5 * size_t(me);  // the inputs' offsets differ by rank
    std::unique_ptr<SharedBuffer> shared = comm.allocate_shared((lead + 2 * total + 1) * e);
    ASSERT_TRUE(shared != nullptr);  // null on every rank alike: no rank is left waiting
    unsigned char* send = shared->data() + lead * e;
    unsigned char* buffer = send + total * e;
    const Buffer in = input(dtype, me, total), want = reference(dtype, total, p);
    if (total > 0) {
      std::memcpy(send, in.bytes.data(), total * e);
      std::memcpy(buffer, in.bytes.data(), total * e);
    }
    const uint64_t before = comm.stats().in_place;
    Buffer recv(dtype, counts[size_t(me)]), reduced(dtype, total);
    comm.reduce_scatter(send, recv.data(), counts, dtype)->wait();
    const bool input_kept = total == 0 || std::memcmp(send, in.bytes.data(), total * e) == 0;
    if (total > 0) std::memset(send, 0xff, total * e);  // NaNs, at once
    comm.all_reduce(buffer, total, dtype)->wait();
    if (total > 0) {
      std::memcpy(reduced.data(), buffer, total * e);
      std::memset(buffer, 0xff, total * e);
    }
    for (size_t i = 0; i < recv.size(); ++i) wrong += recv.bits(i) != want.bits(at + i);
    for (size_t i = 0; i < total; ++i) wrong += reduced.bits(i) != want.bits(i);
    // Both read in place (nothing to read when there are no elements), and the reduce-scatter
    // left its input as it was.
    EXPECT_EQ(comm.stats().in_place - before, total > 0 ? 2u : 0u) << dtype_name(dtype) << " " << total;
    EXPECT_TRUE(input_kept) << dtype_name(dtype) << " " << total;
    comm.barrier()->wait();  // nobody frees the window while a peer may still read it
    ++cases;
  });
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(cases, 15u);
}

TEST(ShmCommShared, InPlaceMatchesRankOrderSum) { check_in_place(kShmStreamFromBytes); }
TEST(ShmCommShared, InPlaceMatchesRankOrderSumStreamed) { check_in_place(0); }

// Ranks whose buffers are shared on some and private on others fail alike, each with the error
// (none waits for a peer), and the communicator works on afterwards. Too large a request for the
// node's shared-memory file system gives null on every rank, even when one rank asked for it.
TEST(ShmCommShared, MixedBuffersFailOnEveryRankAndHugeRequestsGiveNull) {
  ShmComm comm(MPI_COMM_WORLD);
  const int me = comm.rank(), p = comm.size();
  const size_t n = 5000;
  EXPECT_EQ(comm.allocate_shared(me == 0 ? size_t(1) << 60 : 64), nullptr);
  if (p < 2) GTEST_SKIP() << "a mix of shared and private buffers needs two ranks";
  std::unique_ptr<SharedBuffer> shared = comm.allocate_shared(n * sizeof(float));
  ASSERT_TRUE(shared != nullptr);
  Buffer mine = input(DType::kF32, me, n);
  void* buffer = me == 0 ? static_cast<void*>(shared->data()) : mine.data();
  std::string error;
  // Held until the worker has moved on (the next collective returned), so that this thread, not
  // the worker, drops the last reference to the exception: libsupc++'s reference counts are not
  // visible to ThreadSanitizer, which would report the worker's delete against what() here.
  std::shared_ptr<Work> failed = comm.all_reduce(buffer, n, DType::kF32);
  try {
    failed->wait();
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("allocated their buffers differently"), std::string::npos) << error;
  Buffer again = input(DType::kF32, me, n);
  comm.all_reduce(again.data(), n, DType::kF32)->wait();
  failed.reset();
  const Buffer want = reference(DType::kF32, n, p);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += again.bits(i) != want.bits(i);
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// make_shm_comm with ZT_SHM_COLLECTIVES=1: one node is a ShmComm; ZT_SHM_NODE_SIZE simulates
// nodes (a HierComm); a size that does not divide the ranks, or that differs between them, is
// refused on every rank alike (none is left waiting in a collective).
TEST(ShmCommFactory, OneNodeSimulatedNodesAndBadSizes) {
  MpiComm world(MPI_COMM_WORLD);
  const int p = world.size();
  setenv("ZT_SHM_COLLECTIVES", "1", 1);
  setenv("ZT_SHM_NODE_SIZE", "x", 1);
  if (p == 1) {
    EXPECT_EQ(make_shm_comm(world), nullptr);  // one rank: nothing to share, nothing read
  } else {
    unsetenv("ZT_SHM_NODE_SIZE");
    EXPECT_EQ(make_shm_comm(world)->name(), "shm");
    setenv("ZT_SHM_NODE_SIZE", std::to_string(p / 2).c_str(), 1);
    EXPECT_EQ(make_shm_comm(world)->name(), "shm+mpi");
    setenv("ZT_SHM_NODE_SIZE", std::to_string(p + 1).c_str(), 1);
    EXPECT_THROW(make_shm_comm(world), UsageError);
    setenv("ZT_SHM_NODE_SIZE", world.rank() == 0 ? "1" : std::to_string(p).c_str(), 1);
    EXPECT_THROW(make_shm_comm(world), UsageError);
    setenv("ZT_SHM_NODE_SIZE", world.rank() == 0 ? "x" : "1", 1);
    EXPECT_THROW(make_shm_comm(world), UsageError);
  }
  unsetenv("ZT_SHM_NODE_SIZE");
  unsetenv("ZT_SHM_COLLECTIVES");
  EXPECT_EQ(make_shm_comm(world), nullptr);
  // Asked for on rank 0 only: every rank stays with MPI (before, rank 0 went on to a collective
  // the others never joined).
  if (world.rank() == 0) setenv("ZT_SHM_COLLECTIVES", "1", 1);
  EXPECT_EQ(make_shm_comm(world), nullptr);
  unsetenv("ZT_SHM_COLLECTIVES");
}

// This machine is one node: all ranks on it, consecutive.
TEST(NodeLayout, OneNodeHoldsEveryRank) {
  const NodeLayout layout = node_layout(MPI_COMM_WORLD);
  EXPECT_TRUE(layout.one_node);
  EXPECT_EQ(layout.ranks_per_node, world_size());
  // Two ranks of a world of 4 (0 and 2): one node still, and consecutive within the split.
  if (world_size() == 4) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
    const NodeLayout h = node_layout(half);
    EXPECT_TRUE(h.one_node);
    EXPECT_EQ(h.ranks_per_node, 2);
    MPI_Comm_free(&half);
  }
}

}  // namespace
}  // namespace zt
