// The hash behind every seeded choice: the data order (data/sampler.h) and the initial weights
// (model/). Checkpoints and resumed runs depend on its exact values, so it is pinned against
// published reference values (tests/unit/test_hash.cpp).
#pragma once

#include <cstdint>

namespace zt {

/// splitmix64's state increment, 2^64 / golden ratio.
inline constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ull;

/// splitmix64's step (Steele, Lea and Flood; Vigna's splitmix64.c), the increment included:
/// mix64(x) is the first value a splitmix64 generator seeded with x returns, and
/// mix64(x + k * kSplitmix64Gamma) its (k+1)-th. A bijection on 64-bit integers whose every
/// output bit depends on every input bit.
uint64_t mix64(uint64_t x);

}  // namespace zt
