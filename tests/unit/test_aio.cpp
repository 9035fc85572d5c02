// The io_uring swapper's I/O engine and swap files: data round-trips through every "aio" setting,
// errors name the file and the system's message, and nvme_path problems are found up front.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/memory_pool.h"
#include "backend/backend.h"
#include "backend/device_array.h"
#include "offload/aio_engine.h"
#include "offload/param_swapper.h"
#include "offload/swap_file.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct AioCase {
  int64_t block_size, queue_depth, threads;
  bool single_submit, overlap_events;
};

class AioRoundTrip : public ::testing::TestWithParam<AioCase> {};

TEST_P(AioRoundTrip, WhatIsWrittenReadsBack) {
  const AioCase c = GetParam();
  AioConfig config;
  config.block_size = c.block_size;
  config.queue_depth = c.queue_depth;
  config.intra_op_parallelism = c.threads;
  config.single_submit = c.single_submit;
  config.overlap_events = c.overlap_events;
  AioEngine aio(config);
  const size_t bytes = 3 * 1048576 + 5 * 4096;  // not a multiple of the block size
  SwapFile file(fs::temp_directory_path().string(), "test-aio", 2 * bytes, "test");
  // Pinned buffers from the CPU backend, as the swapper's are: page-aligned, which O_DIRECT needs.
  auto backend = make_cpu_backend();
  DeviceArray<uint32_t> out(*backend, bytes / 4, Pool::kPinned), back(*backend, bytes / 4, Pool::kPinned),
      other(*backend, bytes / 4, Pool::kPinned);
  std::iota(out.data(), out.data() + out.size(), 7u);
  std::iota(other.data(), other.data() + other.size(), 1000000u);
  // Two transfers in flight at once, to different offsets.
  auto w1 = aio.write(file.fd(), file.path(), out.data(), bytes, 0);
  auto w2 = aio.write(file.fd(), file.path(), other.data(), bytes, bytes);
  w1->wait();
  w2->wait();
  aio.read(file.fd(), file.path(), back.data(), bytes, 0)->wait();
  EXPECT_EQ(std::memcmp(out.data(), back.data(), bytes), 0);
  aio.read(file.fd(), file.path(), back.data(), bytes, bytes)->wait();
  EXPECT_EQ(std::memcmp(other.data(), back.data(), bytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Settings, AioRoundTrip,
                         ::testing::Values(AioCase{1048576, 8, 1, false, true}, AioCase{4096, 1, 1, false, true},
                                           AioCase{65536, 4, 3, true, true}, AioCase{131072, 16, 2, false, false},
                                           AioCase{8192, 32, 1, true, false}));

TEST(Aio, WriteErrorNamesTheFileAndTheCause) {
  // /dev/full fails every write with ENOSPC: what a full disk looks like to the swapper.
  const int fd = ::open("/dev/full", O_WRONLY);
  ASSERT_GE(fd, 0);
  AioEngine aio(AioConfig{});
  std::vector<unsigned char> data(8192, 1);
  const std::string path = "/dev/full";
  try {
    aio.write(fd, path, data.data(), data.size(), 0)->wait();
    ADD_FAILURE() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full: write of 8192 bytes at offset 0 failed: No space left on device"),
              std::string::npos)
        << e.what();
  }
  ::close(fd);
}

TEST(SwapFile, ProblemsWithTheDirectoryAreUsageErrors) {
  const std::string tmp = fs::temp_directory_path().string();
  auto message = [](const std::string& dir, size_t bytes) {
    try {
      SwapFile f(dir, "probe", bytes, "zero_optimization.offload_optimizer.nvme_path");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string e = message(tmp + "/zt-no-such-dir", 4096);
  EXPECT_NE(e.find("zero_optimization.offload_optimizer.nvme_path: " + tmp + "/zt-no-such-dir: No such file"),
            std::string::npos)
      << e;
  e = message("/etc/hostname", 4096);
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  e = message(tmp, size_t(1) << 60);  // an exabyte
  EXPECT_NE(e.find("needs 1152921504606846976 bytes for probe but only"), std::string::npos) << e;
  const size_t before = pool_in_use()[Pool::kNvme];
  {
    SwapFile f(tmp, "probe", 10000, "key");
    EXPECT_EQ(f.bytes(), 12288u);  // whole pages, for O_DIRECT
    EXPECT_EQ(pool_in_use()[Pool::kNvme], before + 12288);
    EXPECT_FALSE(fs::exists(f.path())) << "unlinked at once, so no crash can leave it behind";
  }
  EXPECT_EQ(pool_in_use()[Pool::kNvme], before);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// The NVMe parameter store: slices straddling the in-memory prefix and the file read back what
// was written (page-unaligned both ends), a prefetched or cached slice is not read again, and
// a write drops what the buffers cached of its range.
TEST(ParamSwapper, ReadsWhatWasWrittenAndCachesSlices) {
  auto backend = make_cpu_backend();
  OffloadConfig config;
  config.device = OffloadConfig::Device::kNvme;
  config.nvme_path = fs::temp_directory_path().string();
  config.buffer_count = 2;
  config.buffer_size = 50000;
  config.max_in_cpu = 5000;  // rounded down to whole pages: 4096 bf16 elements
  const size_t count = 100003;
  ParamSwapper store(*backend, config, AioConfig{}, count, DType::kBF16, 50000, 0);
  EXPECT_EQ(store.resident_elements(), 4096u);
  std::vector<uint16_t> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = uint16_t(i * 7 + 1);
  store.write(0, 30001, values.data());  // unaligned end
  store.write(30001, count - 30001, values.data() + 30001);  // unaligned start
  auto check = [&](size_t lo, size_t hi) {
    const auto* got = static_cast<const uint16_t*>(store.acquire(lo, hi));
    size_t bad = 0;
    for (size_t i = lo; i < hi; ++i) bad += got[i - lo] != values[i];
    store.release(got);
    return bad;
  };
  EXPECT_EQ(check(0, 4000), 0u);        // in memory
  EXPECT_EQ(check(3000, 9000), 0u);     // straddles memory and file
  EXPECT_EQ(check(70001, count), 0u);   // the file's unaligned tail
  const size_t reads = store.reads();
  EXPECT_EQ(check(70001, count), 0u);
  EXPECT_EQ(store.reads(), reads) << "a cached slice was read again";
  store.prefetch(10000, 20000);
  EXPECT_EQ(store.reads(), reads + 1);
  EXPECT_EQ(check(10000, 20000), 0u);
  EXPECT_EQ(store.reads(), reads + 1) << "a prefetched slice was read again";
  for (size_t i = 12000; i < 12010; ++i) values[i] = 0xBEEF;
  store.write(12000, 10, values.data() + 12000);
  EXPECT_EQ(check(10000, 20000), 0u) << "a write left a stale cached slice";
  EXPECT_EQ(store.reads(), reads + 2);
  // Both buffers held: a third slice must wait for a release.
  const void* a = store.acquire(40000, 41000);
  const void* b = store.acquire(50000, 51000);
  EXPECT_FALSE(store.can_acquire());
  store.release(a);
  EXPECT_TRUE(store.can_acquire());
  store.release(b);
}

}  // namespace
}  // namespace zt
