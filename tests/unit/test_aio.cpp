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
#include "offload/aio_engine.h"
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
  PoolArray<uint32_t> out(Pool::kPinned, bytes / 4), back(Pool::kPinned, bytes / 4), other(Pool::kPinned, bytes / 4);
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
