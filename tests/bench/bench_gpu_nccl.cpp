// NcclComm's bus bandwidth against NCCL called directly, in one run (our stand-in for nccl-tests,
// which is not installed): all_reduce, reduce_scatter and all_gather of fp32 over 1 MiB .. 1 GiB,
// each issued through NcclComm (events between the caller's stream and the communication stream,
// a done event per collective) and as the bare NCCL call on a bare cudaStream_t over a second
// NCCL communicator. Bus bandwidth as nccl-tests defines it (its doc/PERFORMANCE.md), from the
// size S of the whole buffer (all-reduce's buffer, reduce-scatter's input, all-gather's output)
// and the time t of one collective, the slowest rank's:
//
//   algbw = S / t;  all_reduce: busbw = algbw * 2(n-1)/n;  reduce_scatter, all_gather: algbw * (n-1)/n
//
// The check: ours at least --min_ratio (0.9) of the bare calls' busbw at every size >= 64 MiB;
// exits 1 when missed, 77 where NCCL cannot run (no GPU, fewer than 2 ranks, ranks sharing a GPU).
// Usage: mpirun -np <GPUs> bench_gpu_nccl [--min_bytes 1048576 --max_bytes 1073741824 --iters 20
//        --trials 3 --min_ratio 0.9]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/device_array.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_comm.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/timer.h"

using namespace zt;
namespace po = boost::program_options;

namespace {

enum class Coll { kAllReduce, kReduceScatter, kAllGather };
constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather};
constexpr size_t kCheckFrom = size_t(64) << 20;  // the ratio is judged from this size up

const char* coll_name(Coll c) {
  return c == Coll::kAllReduce ? "all_reduce" : c == Coll::kReduceScatter ? "reduce_scatter" : "all_gather";
}

// nccl-tests' bus bandwidth factor: how much of the buffer crosses each rank's slowest link.
double bus_factor(Coll c, int n) { return c == Coll::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n; }

// Seconds per collective, the slowest rank's, median over `trials` runs of `iters` back-to-back
// collectives (after two to warm up) waited for once at the end, as nccl-tests times them.
double time_collective(int iters, int trials, const std::function<void()>& issue, const std::function<void()>& wait) {
  for (int i = 0; i < 2; ++i) issue();
  wait();
  std::vector<double> t;
  for (int k = 0; k < trials; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    Stopwatch w;
    for (int i = 0; i < iters; ++i) issue();
    wait();
    double s = w.seconds() / iters;
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Why NCCL cannot run here, the same on every rank ("" when it can).
std::string why_not(int world, int local_rank) {
  int gpus = cuda::device_count();
  int fewest = gpus;
  MPI_Allreduce(&gpus, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest == 0) return "no usable GPU (" + cuda::unavailable_reason() + ")";
  if (world < 2) {
    return cat("one rank: bus bandwidth needs >= 2 ranks, one per GPU (mpirun -np <GPUs>); this node has ", gpus,
               " GPU(s)");
  }
  int over = local_rank >= gpus ? 1 : 0, any_over = 0;
  MPI_Allreduce(&over, &any_over, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_over) {
    return cat("more ranks on a node than GPUs (", gpus, " here): NCCL needs a GPU per rank, so >= 2 GPUs");
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 0;
  try {
    size_t min_bytes = size_t(1) << 20, max_bytes = size_t(1) << 30;
    int iters = 20, trials = 3;
    double min_ratio = 0.9;
    po::options_description opts("bench_gpu_nccl");
    opts.add_options()("min_bytes", po::value(&min_bytes))("max_bytes", po::value(&max_bytes))(
        "iters", po::value(&iters))("trials", po::value(&trials))("min_ratio", po::value(&min_ratio));
    po::variables_map vm;
    if (!parse_tool_command_line(argc, argv, opts, vm)) {
      MPI_Finalize();
      return 0;
    }
    ZT_USAGE_CHECK(min_bytes >= 4 && min_bytes <= max_bytes && iters >= 1 && trials >= 1,
                   "need 4 <= --min_bytes <= --max_bytes, --iters >= 1 and --trials >= 1");
    const int local_rank = node_local_rank();
    if (const std::string why = why_not(world, local_rank); !why.empty()) {
      if (rank == 0) std::printf("skipped: %s\n", why.c_str());
      MPI_Finalize();
      return 77;
    }

    auto backend = cuda::make_cuda_backend(local_rank);
    {
      MpiComm control(MPI_COMM_WORLD);
      NcclComm ours(*backend, control);
      // The bare communicator and stream that the same collectives run on directly.
      ncclUniqueId id{};
      if (rank == 0) ZT_NCCL_CHECK(ncclGetUniqueId(&id));
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      ncclComm_t raw = nullptr;
      ZT_NCCL_CHECK(ncclCommInitRank(&raw, world, id, rank));
      cudaStream_t bare = nullptr;
      ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&bare, cudaStreamNonBlocking));

      // Sizes are rounded down to a multiple of n floats, so every rank's share is whole.
      const size_t max_count = max_bytes / 4 / size_t(world) * size_t(world);
      DeviceArray<float> send(*backend, max_count), recv(*backend, max_count);
      Stream& compute = backend->compute_stream();
      backend->zero_async(send.data(), send.bytes(), compute);
      backend->zero_async(recv.data(), recv.bytes(), compute);
      backend->synchronize(compute);

      if (rank == 0) {
        std::printf("# zerotrain NCCL communicator vs bare NCCL: %d ranks, fp32, %d iterations x %d trials\n", world,
                    iters, trials);
        std::printf("# rank 0: %s\n", backend->describe().c_str());
        std::printf("# busbw as nccl-tests: all_reduce algbw*2(n-1)/n, reduce_scatter and all_gather algbw*(n-1)/n\n");
        std::printf("%14s %-15s %11s %11s %11s %11s %7s\n", "size (B)", "collective", "ours (us)", "ours GB/s",
                    "bare (us)", "bare GB/s", "ratio");
      }
      std::vector<std::string> failures;
      for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        const size_t count = bytes / 4 / size_t(world) * size_t(world), share = count / size_t(world);
        if (share == 0) continue;
        const std::vector<size_t> shares(size_t(world), share);
        for (Coll c : kColls) {
          std::shared_ptr<DataWork> last;
          const auto issue_ours = [&] {
            switch (c) {
              case Coll::kAllReduce:
                last = ours.all_reduce(send.data(), count, DType::kF32, compute);
                break;
              case Coll::kReduceScatter:
                last = ours.reduce_scatter(send.data(), recv.data(), shares, DType::kF32, compute);
                break;
              case Coll::kAllGather:
                last = ours.all_gather(send.data(), recv.data(), shares, DType::kF32, compute);
                break;
            }
          };
          const auto issue_bare = [&] {
            switch (c) {
              case Coll::kAllReduce:
                ZT_NCCL_CHECK(ncclAllReduce(send.data(), send.data(), count, ncclFloat32, ncclSum, raw, bare));
                break;
              case Coll::kReduceScatter:
                ZT_NCCL_CHECK(ncclReduceScatter(send.data(), recv.data(), share, ncclFloat32, ncclSum, raw, bare));
                break;
              case Coll::kAllGather:
                ZT_NCCL_CHECK(ncclAllGather(send.data(), recv.data(), share, ncclFloat32, raw, bare));
                break;
            }
          };
          const double t_ours = time_collective(iters, trials, issue_ours, [&] { last->synchronize(); });
          const double t_bare =
              time_collective(iters, trials, issue_bare, [&] { ZT_CUDA_CHECK(cudaStreamSynchronize(bare)); });
          const double size = double(count) * 4;
          const double bus_ours = size / t_ours * bus_factor(c, world) / 1e9;
          const double bus_bare = size / t_bare * bus_factor(c, world) / 1e9;
          const double ratio = bus_ours / bus_bare;
          if (rank == 0) {
            std::printf("%14.0f %-15s %11.1f %11.2f %11.1f %11.2f %7.3f\n", size, coll_name(c), t_ours * 1e6, bus_ours,
                        t_bare * 1e6, bus_bare, ratio);
          }
          if (size >= double(kCheckFrom) && ratio < min_ratio) {
            failures.push_back(cat(coll_name(c), " at ", size_t(size), " B: ", ratio, "x"));
          }
        }
      }
      ZT_CUDA_CHECK(cudaStreamSynchronize(bare));
      ZT_CUDA_CHECK(cudaStreamDestroy(bare));
      ZT_NCCL_CHECK(ncclCommDestroy(raw));
      // Every rank has the same times (each the slowest rank's), hence the same verdict.
      if (rank == 0) {
        std::printf("RESULT min_ratio=%.2f below=%zu\n", min_ratio, failures.size());
        if (failures.empty()) {
          std::printf("# OK: NcclComm within %.2fx of bare NCCL at every size >= %zu MiB\n", min_ratio,
                      kCheckFrom >> 20);
        } else {
          std::printf("# FAILED: NcclComm below %.2fx of bare NCCL:", min_ratio);
          for (const auto& f : failures) std::printf(" %s;", f.c_str());
          std::printf("\n");
        }
      }
      code = failures.empty() ? 0 : 1;
    }
  } catch (const UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "bench_gpu_nccl: %s\n", e.what());
    code = 2;
  } catch (const std::exception& e) {
    MpiRuntime::abort_job(1, cat("bench_gpu_nccl: error: ", e.what()));
  }
  MPI_Finalize();
  return code;
}
