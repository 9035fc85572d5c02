#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace zt {

std::vector<double> Sampler::distribution(const float* logits, int vocab) const {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(logits, logits + vocab);
  for (double& s : scores) s /= params_.temperature;
  if (params_.top_k > 0 && params_.top_k < vocab) {
    // HF's TopKLogitsWarper: everything below the k-th largest goes (ties with it stay).
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + (params_.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(params_.top_k - 1)];
    for (double& s : scores) s = s < kth ? neg_inf : s;
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  std::vector<double> p(scores.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp(scores[i] - max));
  for (double& x : p) x /= sum;
  if (params_.top_p < 1.0) {
    // HF's TopPLogitsWarper: in ascending order, drop the tokens whose cumulative probability is
    // at most 1 - top_p; the most likely token always stays.
    std::vector<int> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] < p[size_t(b)]; });
    double cumulative = 0, kept = 0;
    for (size_t r = 0; r + 1 < order.size(); ++r) {
      cumulative += p[size_t(order[r])];
      if (cumulative <= 1.0 - params_.top_p) p[size_t(order[r])] = 0;
    }
    for (double x : p) kept += x;
    for (double& x : p) x /= kept;
  }
  return p;
}

int32_t Sampler::next(const float* logits, int vocab) {
  if (!params_.do_sample) return int32_t(std::max_element(logits, logits + vocab) - logits);
  const std::vector<double> p = distribution(logits, vocab);
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  int32_t last = 0;
  for (int i = 0; i < vocab; ++i) {
    if (p[size_t(i)] <= 0) continue;
    last = i;
    u -= p[size_t(i)];
    if (u < 0) return i;
  }
  return last;  // rounding left u a hair above 0: the last possible token
}

}  // namespace zt
