// Seeded normal (mean 0) test data, the same on every machine for a seed (std::mt19937).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace zt {

template <typename T = float>
std::vector<T> randn(size_t n, uint32_t seed, T scale = T(1)) {
  std::mt19937 rng(seed);
  std::normal_distribution<T> d(T(0), scale);
  std::vector<T> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace zt
