// What the GPU tests that check the CUDA backend against the CPU backend share (as ggml's
// test-backend-ops checks every backend against the CPU): both backends, arrays held alike on
// both, and the random inputs several ops take.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_array.h"

namespace zt {

/// The same array on both backends, filled from one host vector.
template <typename T>
struct Twin {
  Backend* gpu;
  DeviceArray<T> g, c;
  T* on(Backend& b) { return &b == gpu ? g.data() : c.data(); }
};

/// A fixture with the CUDA backend (GPU 0) and the CPU backend.
class CpuGpuTest : public ::testing::Test {
 public:  // the shape checks are free functions over the fixture
  std::unique_ptr<Backend> gpu = cuda::make_cuda_backend(0);
  std::unique_ptr<Backend> cpu = make_cpu_backend();

  template <typename T>
  Twin<T> twin(const std::vector<T>& host) {
    Twin<T> t{gpu.get(), DeviceArray<T>(*gpu, host.size()), DeviceArray<T>(*cpu, host.size())};
    gpu->copy_from_host(t.g.data(), host.data(), host.size() * sizeof(T));
    cpu->copy_from_host(t.c.data(), host.data(), host.size() * sizeof(T));
    return t;
  }

  /// `a` copied into host memory.
  template <typename T>
  static std::vector<T> read(Backend& b, const DeviceArray<T>& a) {
    std::vector<T> host(a.size());
    b.copy_to_host(host.data(), a.data(), a.bytes());
    return host;
  }
};

/// n tokens below `vocab`; with `some_ignored`, every fifth is -1 (no target).
inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed, bool some_ignored = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  if (some_ignored)
    for (size_t i = 0; i < n; i += 5) v[i] = -1;
  return v;
}

/// cos and sin [T, hs/2] of HF's default rope (theta 10000), in fp32.
inline std::pair<std::vector<float>, std::vector<float>> rope_angles(int T, int hs) {
  const int half = hs / 2;
  std::vector<float> c(size_t(T) * half), s(size_t(T) * half);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / hs);
      c[size_t(t) * half + i] = float(std::cos(angle));
      s[size_t(t) * half + i] = float(std::sin(angle));
    }
  return {c, s};
}

}  // namespace zt
