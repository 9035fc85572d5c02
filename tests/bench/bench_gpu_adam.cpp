// The fused Adam/AdamW step on one GPU against the device's own copy bandwidth, in one run: a
// device-to-device copy of a large buffer measures what the memory delivers, and the Adam step
// over the same number of elements is judged by the bytes it must move (read the gradient, the
// fp32 master and both moments; write the master, the moments and the 16-bit parameter). The
// check: Adam's effective bandwidth at least --min_ratio (0.8) of the copy's, and Lion's and
// Adagrad's (issue 31: one moment, 20 bytes an element) too; exits 1 when missed, 77 without a GPU. Usage: bench_gpu_adam [--elements 268435456 --reps 20 --min_ratio 0.8]
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "backend/accelerator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/timer.h"

using namespace zt;
namespace po = boost::program_options;

namespace {

// Median seconds of `reps` runs of `body` on the compute stream, each waited for.
template <typename F>
double median_seconds(Backend& backend, int reps, F body) {
  body();  // warm-up
  backend.synchronize(backend.compute_stream());
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    Stopwatch w;
    body();
    backend.synchronize(backend.compute_stream());
    t.push_back(w.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  size_t n = size_t(1) << 28;
  int reps = 20;
  double min_ratio = 0.8;
  po::options_description opts("bench_gpu_adam");
  opts.add_options()("elements", po::value(&n))("reps", po::value(&reps))("min_ratio", po::value(&min_ratio));
  po::variables_map vm;
  parse_tool_command_line(argc, argv, opts, vm);
  ZT_USAGE_CHECK(n >= 1 && reps >= 1, "--elements and --reps must be >= 1");
  if (cuda::device_count() == 0) {
    std::printf("skipped: no usable GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  auto backend = make_backend("cuda", 0, "bench_gpu_adam");
  Stream& s = backend->compute_stream();
  DeviceArray<float> master(*backend, n), m(*backend, n), v(*backend, n), copy_src(*backend, n), copy_dst(*backend, n);
  DeviceArray<uint16_t> grad(*backend, n), param(*backend, n);
  for (auto* a : {&master, &m, &v, &copy_src, &copy_dst}) backend->zero_async(a->data(), a->bytes(), s);
  backend->zero_async(grad.data(), grad.bytes(), s);

  std::printf("# zerotrain fused Adam benchmark: %s, %zu elements\n", backend->describe().c_str(), n);
  const double copy_s = median_seconds(*backend, reps, [&] { backend->copy_async(copy_dst.data(), copy_src.data(), copy_src.bytes(), s); });
  const double copy_gbs = 2.0 * copy_src.bytes() / copy_s / 1e9;  // read + write

  OptimizerStepArgs args;
  args.lr = 1e-4f;
  args.weight_decay = 0.01f;
  const double adam_s = median_seconds(*backend, reps, [&] {
    backend->optimizer_ops().adam_step(args, master.data(), m.data(), v.data(), grad.data(), DType::kBF16, param.data(),
                                       DType::kBF16, n);
  });
  const double adam_bytes = double(n) * (2 + 4 * 3 + 4 * 3 + 2);  // bf16 grad in, fp32 x3 in and out, bf16 param out
  const double adam_gbs = adam_bytes / adam_s / 1e9;
  const double ratio = adam_gbs / copy_gbs;
  // Lion (exp_avg) and Adagrad (exp_avg_sq): bf16 grad in, fp32 master and one moment in and out,
  // bf16 param out: 20 bytes an element.
  auto one_moment_gbs = [&](UpdateRule rule) {
    OptimizerStepArgs a = args;
    a.rule = rule;
    const double sec = median_seconds(*backend, reps, [&] {
      backend->optimizer_ops().step(a, master.data(), m.data(), v.data(), grad.data(), DType::kBF16, param.data(),
                                    DType::kBF16, n);
    });
    return double(n) * 20 / sec / 1e9;
  };
  const double lion_gbs = one_moment_gbs(UpdateRule::kLion), adagrad_gbs = one_moment_gbs(UpdateRule::kAdagrad);
  std::printf("%-34s %10s %12s\n", "operation", "ms", "GB/s");
  std::printf("%-34s %10.3f %12.1f\n", "device copy (read + write)", copy_s * 1e3, copy_gbs);
  std::printf("%-34s %10.3f %12.1f\n", "adam_step bf16 grad -> bf16 param", adam_s * 1e3, adam_gbs);
  std::printf("%-34s %10.3f %12.1f\n", "lion_step", double(n) * 20 / lion_gbs / 1e6, lion_gbs);
  std::printf("%-34s %10.3f %12.1f\n", "adagrad_step", double(n) * 20 / adagrad_gbs / 1e6, adagrad_gbs);
  std::printf("RESULT adam_gbs=%.1f copy_gbs=%.1f ratio=%.3f min_ratio=%.2f lion_ratio=%.3f adagrad_ratio=%.3f\n",
              adam_gbs, copy_gbs, ratio, min_ratio, lion_gbs / copy_gbs, adagrad_gbs / copy_gbs);
  bool ok = true;
  for (const auto& [name, r] : {std::pair{"Adam", ratio}, std::pair{"Lion", lion_gbs / copy_gbs},
                                std::pair{"Adagrad", adagrad_gbs / copy_gbs}}) {
    if (r < min_ratio) {
      std::printf("FAIL: the fused %s moves %.2f of the copy bandwidth, below %.2f\n", name, r, min_ratio);
      ok = false;
    }
  }
  return ok ? 0 : 1;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_adam: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_adam: error: %s\n", e.what());
  return 1;
}
