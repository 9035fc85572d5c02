// The NVMe swapper on its own: sub-group swaps through OptimizerOffload (io_uring, O_DIRECT,
// aligned buffers), timed as the optimizer step uses them. Prints read and write GB/s for a
// file of --gib GiB in pieces of --sub_group_size elements (12 bytes each), and the combined
// read-and-write walk of a step. bench_nvme_swap.sh runs fio beside it.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <vector>

#include "backend/backend.h"
#include "core/timer.h"
#include "offload/optimizer_offload.h"

namespace po = boost::program_options;
using namespace zt;

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  double gib = 2;
  int64_t sub_group = 8 << 20, block = 1 << 20, depth = 8, threads = 1, reps = 3;
  po::options_description opts("bench_nvme_swap");
  opts.add_options()("dir", po::value(&dir), "directory on the drive (nvme_path)")(
      "gib", po::value(&gib), "file size in GiB")("sub_group_size", po::value(&sub_group), "elements per piece")(
      "block_size", po::value(&block), "aio.block_size")("queue_depth", po::value(&depth), "aio.queue_depth")(
      "intra_op_parallelism", po::value(&threads), "aio.intra_op_parallelism")("reps", po::value(&reps), "repetitions");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, opts), vm);
  po::notify(vm);

  auto backend = make_cpu_backend();
  OffloadConfig off;
  off.device = OffloadConfig::Device::kNvme;
  off.nvme_path = dir;
  off.pin_memory = true;
  AioConfig aio;
  aio.block_size = block;
  aio.queue_depth = depth;
  aio.intra_op_parallelism = threads;
  const size_t count = size_t(gib * double(1ull << 30) / 12.0);
  OptimizerOffload swap(*backend, off, OptimizerConfig{}, aio, count, size_t(sub_group), DType::kBF16, 0);  // AdamW
  const double bytes = double(swap.nvme_bytes());
  auto time_walk = [&](SwapMode mode) {
    std::vector<double> seconds;
    for (int64_t r = 0; r < reps; ++r) {
      Stopwatch clock;
      swap.visit(0, count, mode, [](const OffloadPiece&) {});
      swap.flush();
      seconds.push_back(clock.seconds());
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  };
  const double write_s = time_walk(SwapMode::kWrite), read_s = time_walk(SwapMode::kRead);
  const double both_s = time_walk(SwapMode::kReadWrite);
  std::printf("# swapper: %.2f GiB in pieces of %lld elements (%.0f MiB), block %lld, queue depth %lld, %lld ring(s)\n",
              bytes / double(1ull << 30), (long long)sub_group, 12.0 * double(sub_group) / double(1 << 20),
              (long long)block, (long long)depth, (long long)threads);
  std::printf("write %.3f GB/s, read %.3f GB/s, read+write walk %.3f GB/s each way (%.2f s)\n", bytes / write_s / 1e9,
              bytes / read_s / 1e9, bytes / both_s / 1e9, both_s);
  std::printf("RESULT swap_write_gbs=%.4f swap_read_gbs=%.4f swap_rw_s=%.4f swap_bytes=%.0f\n", bytes / write_s / 1e9,
              bytes / read_s / 1e9, both_s, bytes);
  return 0;
}
