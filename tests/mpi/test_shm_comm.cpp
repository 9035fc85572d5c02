// ShmComm (comm/shm_comm.h) against a reference computed here in rank order, and against MpiComm:
// every collective, every dtype, uneven and zero counts, and messages of many steps (a small
// staging buffer makes a few thousand elements cross dozens of chunks).
#include "comm/shm_comm.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/dtype.h"

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

// Reference sums of n elements, computed once per (dtype, n): cheaper than reference_sum.
Buffer reference(DType dtype, size_t n, int ranks) {
  std::vector<Buffer> in;
  for (int r = 0; r < ranks; ++r) in.push_back(input(dtype, r, n));
  Buffer out(dtype, n);
  for (size_t i = 0; i < n; ++i) {
    out.set(i, in[0].get(i));
    for (int r = 1; r < ranks; ++r) out.set(i, out.get(i) + in[size_t(r)].get(i));
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

class ShmCommTest : public ::testing::TestWithParam<size_t> {};  // staging bytes

TEST_P(ShmCommTest, ReduceScatterMatchesRankOrderSum) {
  ShmComm comm(MPI_COMM_WORLD, GetParam());
  const int me = comm.rank(), p = comm.size();
  for_each_case(me, p, [&](DType dtype, const std::vector<size_t>& counts, size_t total, size_t at) {
    Buffer send = input(dtype, me, total), recv(dtype, counts[size_t(me)]);
    const Buffer want = reference(dtype, total, p);
    comm.reduce_scatter(send.data(), recv.data(), counts, dtype)->wait();
    for (size_t i = 0; i < recv.size(); ++i) {
      ASSERT_EQ(recv.bits(i), want.bits(at + i)) << dtype_name(dtype) << " element " << at + i;
    }
  });
}

TEST_P(ShmCommTest, AllGatherConcatenatesInRankOrder) {
  ShmComm comm(MPI_COMM_WORLD, GetParam());
  const int me = comm.rank(), p = comm.size();
  for_each_case(me, p, [&](DType dtype, const std::vector<size_t>& counts, size_t total, size_t at) {
    for (bool in_place : {false, true}) {
      Buffer recv(dtype, total), send = input(dtype, me, counts[size_t(me)]);
      const void* from = send.data();
      if (in_place) {
        std::memcpy(recv.bytes.data() + at * dtype_size(dtype), send.data(), send.bytes.size());
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
  ShmComm comm(MPI_COMM_WORLD, GetParam());
  for (DType dtype : kDtypes) {
    for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(1000), size_t(12345)}) {
      Buffer buf = input(dtype, comm.rank(), n);
      const Buffer want = reference(dtype, n, comm.size());
      comm.all_reduce(buf.data(), n, dtype)->wait();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf.bits(i), want.bits(i)) << dtype_name(dtype) << " n " << n << " i " << i;
    }
  }
}

TEST_P(ShmCommTest, BroadcastBarrierAndDoubles) {
  ShmComm comm(MPI_COMM_WORLD, GetParam());
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

// Several collectives in flight at once, waited for in reverse: each completes in issue order.
TEST_P(ShmCommTest, AsyncCollectivesInFlight) {
  ShmComm comm(MPI_COMM_WORLD, GetParam());
  const int p = comm.size();
  const size_t n = 5000;
  std::vector<Buffer> bufs;
  for (int k = 0; k < 4; ++k) bufs.push_back(input(DType::kF32, comm.rank(), n));
  std::vector<std::shared_ptr<Work>> works;
  for (auto& b : bufs) works.push_back(comm.all_reduce(b.data(), n, DType::kF32));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  const Buffer want = reference(DType::kF32, n, p);
  for (auto& b : bufs) ASSERT_EQ(b.bytes, want.bytes);
}

// Against MpiComm: the same bits at 2 ranks for every dtype (a sum of two is the same in either
// order); beyond, MPI's own order may round differently in the last place.
TEST_P(ShmCommTest, AgreesWithMpiComm) {
  ShmComm shm(MPI_COMM_WORLD, GetParam());
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
INSTANTIATE_TEST_SUITE_P(Staging, ShmCommTest, ::testing::Values(size_t(4096), kShmChunkBytes));

// A message of several default chunks, fp32 and bf16.
TEST(ShmCommLarge, ManyChunks) {
  ShmComm comm(MPI_COMM_WORLD);
  const int p = comm.size();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t n = 3 * kShmChunkBytes / dtype_size(dtype) + 777;
    Buffer buf = input(dtype, comm.rank(), n);
    comm.all_reduce(buf.data(), n, dtype)->wait();
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(buf.get(i), reference_sum(dtype, i, p)) << i;
    std::vector<size_t> counts(size_t(p), n / size_t(p));
    counts.back() += n % size_t(p);
    Buffer send = input(dtype, comm.rank(), n), recv(dtype, counts[size_t(comm.rank())]);
    comm.reduce_scatter(send.data(), recv.data(), counts, dtype)->wait();
    const size_t at = size_t(comm.rank()) * (n / size_t(p));
    for (size_t i = 0; i < recv.size(); i += 991) ASSERT_EQ(recv.get(i), reference_sum(dtype, at + i, p)) << i;
  }
  EXPECT_EQ(world_size(), p);
  EXPECT_EQ(world_rank(), comm.rank());
}

}  // namespace
}  // namespace zt
