// CPU Adam throughput (issue 5's target: >= 80% of STREAM-triad bandwidth, >= 8x torch AdamW),
// side by side in one run: our fused kernel (bf16 gradient in, fp32 master + moments updated,
// bf16 parameter out, one pass), a plain compiler-vectorised loop doing the same arithmetic
// through an fp32 gradient copy, and STREAM triad (a = b + s c) on arrays of the same size.
// Lion's and Adagrad's fused kernels (issue 31) beside them: one moment each, 20 bytes a parameter.
// bench_cpu_adam.sh adds torch.optim.AdamW on the same data.
// Usage: bench_cpu_adam [--params 100000000 --reps 5]
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "core/memory_pool.h"
#include "core/timer.h"

using namespace zt;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 100'000'000;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--params") n = size_t(std::atoll(argv[i + 1]));
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
  }
  auto backend = make_cpu_backend();
  // Host-pool arrays from the CPU backend: pool_alloc's huge pages and first touch, as the engine's
  // buffers have, and memory the host loops below may touch directly.
  DeviceArray<float> master(*backend, n, Pool::kHost), m(*backend, n, Pool::kHost), v(*backend, n, Pool::kHost),
      grad32(*backend, n, Pool::kHost);
  DeviceArray<bf16> grad(*backend, n, Pool::kHost), param(*backend, n, Pool::kHost);
  {
    float* ma = master.data();
    float* mm = m.data();
    float* vv = v.data();
    bf16* g = grad.data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      ma[i] = 0.01f * float(i % 1000);
      mm[i] = 0;
      vv[i] = 0;
      g[i] = to_bf16(1e-3f * float(i % 777) - 0.3f);
    }
  }
  OptimizerStepArgs args;
  args.lr = 1e-4f;
  args.weight_decay = 0.01f;
  args.bias_correction1 = 0.1f;
  args.bias_correction2 = 0.001f;

  // Fused: 16-bit grad in, 16-bit param out, no fp32 gradient copy.
  std::vector<double> fused;
  for (int r = 0; r <= reps; ++r) {
    Stopwatch w;
    backend->optimizer_ops().adam_step(args, master.data(), m.data(), v.data(), grad.data(), DType::kBF16,
                                       param.data(), DType::kBF16, n);
    if (r > 0) fused.push_back(w.seconds());
  }
  // Lion and Adagrad: the same pass with one moment (m for Lion, v for Adagrad).
  auto time_rule = [&](UpdateRule rule) {
    OptimizerStepArgs a = args;
    a.rule = rule;
    std::vector<double> seconds;
    for (int r = 0; r <= reps; ++r) {
      Stopwatch w;
      backend->optimizer_ops().step(a, master.data(), m.data(), v.data(), grad.data(), DType::kBF16, param.data(),
                                    DType::kBF16, n);
      if (r > 0) seconds.push_back(w.seconds());
    }
    return median(seconds);
  };
  const double lion_s = time_rule(UpdateRule::kLion), adagrad_s = time_rule(UpdateRule::kAdagrad);
  // Plain: convert the gradient to fp32, then a straightforward loop the compiler vectorises.
  std::vector<double> plain;
  for (int r = 0; r <= reps; ++r) {
    Stopwatch w;
    convert(grad.data(), grad32.data(), n);
    const float b1 = args.beta1, b2 = args.beta2, lr = args.lr, eps = args.eps, wd = args.weight_decay;
    const float bc1 = args.bias_correction1, bc2 = args.bias_correction2;
    float* ma = master.data();
    float* mm = m.data();
    float* vv = v.data();
    const float* g = grad32.data();
    bf16* p = param.data();
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) {
      float w0 = ma[i] * (1 - lr * wd);
      mm[i] = b1 * mm[i] + (1 - b1) * g[i];
      vv[i] = b2 * vv[i] + (1 - b2) * g[i] * g[i];
      w0 -= lr * (mm[i] / bc1) / (std::sqrt(vv[i] / bc2) + eps);
      ma[i] = w0;
      p[i] = to_bf16(w0);
    }
    if (r > 0) plain.push_back(w.seconds());
  }
  // STREAM triad on three fp32 arrays of n elements: 12 bytes per element.
  std::vector<double> triad;
  for (int r = 0; r <= reps; ++r) {
    float* a = grad32.data();
    const float* b = m.data();
    const float* c = v.data();
    Stopwatch w;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
    if (r > 0) triad.push_back(w.seconds());
  }
  // Bytes per parameter: fused reads master, m, v (12) + bf16 grad (2), writes master, m, v (12)
  // + bf16 param (2) = 28. Plain adds the fp32 gradient copy: write 4 + read 4 more = 36.
  const double fused_s = median(fused), plain_s = median(plain), triad_s = median(triad);
  const double fused_gbs = 28.0 * double(n) / fused_s / 1e9, plain_gbs = 36.0 * double(n) / plain_s / 1e9;
  const double triad_gbs = 12.0 * double(n) / triad_s / 1e9;
  std::printf("# CPU Adam over %zu parameters, %d threads, %s\n", n, omp_get_max_threads(), backend->describe().c_str());
  std::printf("%-34s %12s %10s %10s\n", "", "Mparams/s", "B/param", "GB/s");
  std::printf("%-34s %12.1f %10d %10.2f\n", "fused (bf16 grad in, bf16 out)", n / fused_s / 1e6, 28, fused_gbs);
  std::printf("%-34s %12.1f %10d %10.2f\n", "plain loop (via fp32 grad copy)", n / plain_s / 1e6, 36, plain_gbs);
  // Lion and Adagrad: master and one moment read and written (16) + bf16 grad and param (4) = 20.
  const double lion_gbs = 20.0 * double(n) / lion_s / 1e9, adagrad_gbs = 20.0 * double(n) / adagrad_s / 1e9;
  std::printf("%-34s %12.1f %10d %10.2f\n", "fused Lion", n / lion_s / 1e6, 20, lion_gbs);
  std::printf("%-34s %12.1f %10d %10.2f\n", "fused Adagrad", n / adagrad_s / 1e6, 20, adagrad_gbs);
  std::printf("%-34s %12s %10d %10.2f\n", "STREAM triad", "", 12, triad_gbs);
  std::printf("fused vs triad bandwidth: %.0f%% (target >= 80%%); fused vs plain: %.2fx\n", 100 * fused_gbs / triad_gbs,
              plain_s / fused_s);
  std::printf("Lion vs triad bandwidth: %.0f%%, Adagrad: %.0f%% (target >= 80%%)\n", 100 * lion_gbs / triad_gbs,
              100 * adagrad_gbs / triad_gbs);
  std::printf("RESULT fused_mparams=%.2f plain_mparams=%.2f fused_gbs=%.3f triad_gbs=%.3f lion_gbs=%.3f adagrad_gbs=%.3f\n",
              n / fused_s / 1e6, n / plain_s / 1e6, fused_gbs, triad_gbs, lion_gbs, adagrad_gbs);
  return 0;
}
