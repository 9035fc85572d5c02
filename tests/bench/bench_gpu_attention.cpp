// Attention forward and forward+backward of the CUDA bf16 kernels (flash attention,
// cuda_flash_attention.cu) on one GPU, at the shapes tests/bench/torch_sdpa_bench.py times
// PyTorch's scaled_dot_product_attention at: causal, T 1024/2048/4096, head sizes 64 (12 heads)
// and 128 (16 heads), B x T = 16384 tokens. Each case: the median of --iters runs timed with the
// backend's timing events, and its TFLOP/s (causal forward 2 B NH T^2 hd FLOPs, forward+backward
// 3.5x that, as FlashAttention counts). Exits 77 without a GPU.
// Usage: bench_gpu_attention [--T 1024,2048,4096 --hd 64,128 --tokens 16384 --iters 10]
// One line per case: RESULT T=... hd=... B=... NH=... fwd_ms=... fwd_bwd_ms=... fwd_tflops=...
// fwd_bwd_tflops=...
#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/accelerator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"
#include "config/tool_options.h"
#include "core/error.h"

using namespace zt;
namespace po = boost::program_options;

namespace {

std::vector<int> parse_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    try {
      out.push_back(std::stoi(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_USAGE_CHECK(used > 0 && used == item.size(), "--", flag, ": '", item, "' is not a number");
    ZT_USAGE_CHECK(out.back() > 0, "--", flag, " takes positive numbers, got ", out.back());
  }
  return out;
}

// The median of `iters` runs of fn on the compute stream, in ms.
template <typename Fn>
double median_ms(Backend& backend, int iters, Fn fn) {
  fn();  // warm-up
  std::vector<double> ms;
  auto start = backend.create_timing_event(), end = backend.create_timing_event();
  for (int i = 0; i < iters; ++i) {
    backend.record(*start, backend.compute_stream());
    fn();
    backend.record(*end, backend.compute_stream());
    ms.push_back(backend.elapsed_ms(*start, *end));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::string t_text = "1024,2048,4096", hd_text = "64,128";
  int tokens = 16384, iters = 10;
  po::options_description opts("bench_gpu_attention");
  opts.add_options()("T", po::value(&t_text))("hd", po::value(&hd_text))("tokens", po::value(&tokens))(
      "iters", po::value(&iters));
  po::variables_map vm;
  parse_tool_command_line(argc, argv, opts, vm);
  const std::vector<int> Ts = parse_list(t_text, "T"), hds = parse_list(hd_text, "hd");
  ZT_USAGE_CHECK(tokens > 0 && iters > 0, "--tokens and --iters must be positive");
  if (cuda::device_count() == 0) {
    std::printf("skipped: no usable GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  auto backend = make_backend("cuda", 0, "bench_gpu_attention");
  KernelOps<bf16>& ops = backend->ops_bf16();
  std::printf("# zerotrain flash attention (bf16, causal): %s\n", backend->describe().c_str());
  std::printf("%6s %4s %4s %4s %10s %12s %10s %14s\n", "T", "hd", "B", "NH", "fwd ms", "fwd+bwd ms", "fwd TF/s",
              "fwd+bwd TF/s");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int hd : hds) {
    const int NH = hd == 64 ? 12 : 16;  // torch_sdpa_bench.py's --heads 64:12,128:16
    for (int T : Ts) {
      const int B = std::max(1, tokens / T);
      const size_t n = size_t(B) * T * NH * hd;
      std::vector<bf16> host(n);
      DeviceArray<bf16> q(*backend, n), k(*backend, n), v(*backend, n), out(*backend, n), dout(*backend, n);
      DeviceArray<bf16> dq(*backend, n), dk(*backend, n), dv(*backend, n);
      DeviceArray<float> lse(*backend, size_t(B) * NH * T);
      for (auto* a : {&q, &k, &v, &dout}) {
        for (auto& x : host) x = to_bf16(normal(rng));
        backend->copy_from_host(a->data(), host.data(), n * sizeof(bf16));
      }
      const double fwd = median_ms(*backend, iters, [&] {
        ops.gqa_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, T, NH, NH, hd);
      });
      const double fwd_bwd = median_ms(*backend, iters, [&] {
        ops.gqa_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, T, NH, NH, hd);
        ops.gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), q.data(), k.data(),
                                   v.data(), lse.data(), B, T, NH, NH, hd);
      });
      const double flops = 2.0 * B * NH * double(T) * T * hd;  // causal: half of 4 B NH T^2 hd
      std::printf("%6d %4d %4d %4d %10.3f %12.3f %10.1f %14.1f\n", T, hd, B, NH, fwd, fwd_bwd, flops / fwd / 1e9,
                  3.5 * flops / fwd_bwd / 1e9);
      std::printf("RESULT T=%d hd=%d B=%d NH=%d fwd_ms=%.4f fwd_bwd_ms=%.4f fwd_tflops=%.1f fwd_bwd_tflops=%.1f\n", T,
                  hd, B, NH, fwd, fwd_bwd, flops / fwd / 1e9, 3.5 * flops / fwd_bwd / 1e9);
    }
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_attention: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_attention: error: %s\n", e.what());
  return 1;
}
