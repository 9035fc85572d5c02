// mix64 against published splitmix64 output. Every seeded choice (the data order, the initial
// weights) goes through it, so a change to any of its constants would silently change what a
// seed means and break resuming from older checkpoints; the values below come from outside
// this code, not from running it.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/hash.h"

namespace zt {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // splitmix64's state increment

// The k-th value (from 0) of a splitmix64 generator seeded with `seed`.
uint64_t splitmix64_output(uint64_t seed, uint64_t k) { return mix64(seed + k * kGamma); }

}  // namespace

// rand_xoshiro's test `reference` (rust-random/rngs, rand_xoshiro/src/splitmix64.rs), whose
// values were produced with Vigna's reference splitmix64.c: the first six of its fifty.
TEST(Hash, MatchesReferenceSplitmix64) {
  const uint64_t expected[] = {1985237415132408290ull, 2979275885539914483ull,  13511426838097143398ull,
                               8488337342461049707ull, 15141737807933549159ull, 17093170987380407015ull};
  for (uint64_t k = 0; k < 6; ++k) EXPECT_EQ(splitmix64_output(1477776061723855037ull, k), expected[k]) << k;
}

// Rosetta Code's task "Pseudo-random numbers/Splitmix64": the first five integers for seed 1234567.
TEST(Hash, MatchesRosettaCodeSplitmix64) {
  const uint64_t expected[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                               4593380528125082431ull, 16408922859458223821ull};
  for (uint64_t k = 0; k < 5; ++k) EXPECT_EQ(splitmix64_output(1234567, k), expected[k]) << k;
}

}  // namespace zt
