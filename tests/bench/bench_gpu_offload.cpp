// ZeRO-Offload's copies on one GPU against what pinned memory delivers, in one run. The reference
// is one cudaMemcpyAsync of the whole buffer between pinned host memory and the device, on a bare
// stream. The offload path is the backend's: copy_async in offload pieces on a stream of its own,
// each piece ordered by an event as the engine orders its gradient copies (device -> pinned,
// during backward) and its parameter copies (pinned -> device, after the CPU Adam). The check:
// both directions at least --min_ratio (0.8) of the reference; exits 1 when missed, 77 without a GPU.
// Usage: bench_gpu_offload [--mib 1024 --piece_mib 64 --reps 10 --min_ratio 0.8]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/accelerator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/device_array.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/timer.h"

using namespace zt;
namespace po = boost::program_options;

namespace {

template <typename F>
double median_seconds(int reps, F body) {
  body();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    Stopwatch w;
    body();
    t.push_back(w.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  size_t mib = 1024, piece_mib = 64;
  int reps = 10;
  double min_ratio = 0.8;
  po::options_description opts("bench_gpu_offload");
  opts.add_options()("mib", po::value(&mib))("piece_mib", po::value(&piece_mib))("reps", po::value(&reps))(
      "min_ratio", po::value(&min_ratio));
  po::variables_map vm;
  parse_tool_command_line(argc, argv, opts, vm);
  ZT_USAGE_CHECK(mib >= 1 && piece_mib >= 1 && reps >= 1, "--mib, --piece_mib and --reps must be >= 1");
  if (cuda::device_count() == 0) {
    std::printf("skipped: no usable GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  auto backend = make_backend("cuda", 0, "bench_gpu_offload");
  const size_t bytes = mib << 20, piece = std::min(bytes, piece_mib << 20);
  DeviceArray<unsigned char> dev(*backend, bytes), host(*backend, bytes, Pool::kPinned);
  backend->zero_async(dev.data(), bytes, backend->compute_stream());
  backend->zero_async(host.data(), bytes, backend->compute_stream());
  backend->synchronize();

  cudaStream_t bare = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&bare, cudaStreamNonBlocking));
  auto raw = [&](void* dst, const void* src) {
    return median_seconds(reps, [&] {
      ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, bare));
      ZT_CUDA_CHECK(cudaStreamSynchronize(bare));
    });
  };
  auto copy_stream = backend->create_stream("offload copies");
  auto ready = backend->create_event();
  auto pieces = [&](unsigned char* dst, const unsigned char* src) {
    return median_seconds(reps, [&] {
      for (size_t off = 0; off < bytes; off += piece) {
        // As the engine: each piece waits for the compute stream's point where its data is ready.
        backend->record(*ready, backend->compute_stream());
        backend->wait(*copy_stream, *ready);
        backend->copy_async(dst + off, src + off, std::min(piece, bytes - off), *copy_stream);
      }
      backend->synchronize(*copy_stream);
    });
  };
  const double d2h_raw = raw(host.data(), dev.data()), h2d_raw = raw(dev.data(), host.data());
  const double d2h = pieces(host.data(), dev.data()), h2d = pieces(dev.data(), host.data());
  cudaStreamDestroy(bare);

  auto gbs = [&](double s) { return bytes / s / 1e9; };
  std::printf("# zerotrain offload copy benchmark: %s, %zu MiB in %zu MiB pieces\n", backend->describe().c_str(), mib,
              piece >> 20);
  std::printf("%-26s %12s %12s %8s\n", "direction", "pinned GB/s", "offload GB/s", "ratio");
  std::printf("%-26s %12.1f %12.1f %8.3f\n", "device -> pinned (grads)", gbs(d2h_raw), gbs(d2h), d2h_raw / d2h);
  std::printf("%-26s %12.1f %12.1f %8.3f\n", "pinned -> device (params)", gbs(h2d_raw), gbs(h2d), h2d_raw / h2d);
  const double worst = std::min(d2h_raw / d2h, h2d_raw / h2d);
  std::printf("RESULT d2h_ratio=%.3f h2d_ratio=%.3f min_ratio=%.2f\n", d2h_raw / d2h, h2d_raw / h2d, min_ratio);
  if (worst < min_ratio) {
    std::printf("FAIL: offload copies reach %.2f of pinned bandwidth, below %.2f\n", worst, min_ratio);
    return 1;
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_offload: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_offload: error: %s\n", e.what());
  return 1;
}
