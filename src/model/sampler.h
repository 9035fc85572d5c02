// The next token from a position's logits, as HF generate chooses it: greedy (the first largest
// logit, as torch.argmax), or sampled after HF's warpers in HF's order: temperature, top-k, top-p.
// Draws come from a seeded std::mt19937_64, so a seed repeats a run exactly; they are not torch's
// draws, so a sampled sequence is not HF's token for token.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace zt {

struct SamplingParams {
  bool do_sample = false;
  double temperature = 1.0;  ///< > 0
  int top_k = 50;            ///< 0: off (HF's default is 50)
  double top_p = 1.0;        ///< in (0, 1]; 1: off
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t seed) : params_(params), rng_(seed) {}
  /// The chosen id among logits[0, vocab).
  int32_t next(const float* logits, int vocab);
  /// The probabilities sampling draws from (after the warpers; zero where filtered), for tests.
  std::vector<double> distribution(const float* logits, int vocab) const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace zt
