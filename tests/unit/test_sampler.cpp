// The next-token choice against HF's warpers, recomputed here: greedy takes the first largest
// logit; temperature, top-k (ties with the k-th stay) and top-p (HF's ascending cumulative rule)
// give the distributions written out below; draws follow the distribution and repeat with a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/sampler.h"

namespace zt {
namespace {

std::vector<double> softmax(const std::vector<float>& l, double temperature) {
  double m = -1e300, s = 0;
  for (float x : l) m = std::max(m, double(x) / temperature);
  std::vector<double> p;
  for (float x : l) s += p.emplace_back(std::exp(double(x) / temperature - m));
  for (double& x : p) x /= s;
  return p;
}

TEST(Sampler, GreedyTakesTheFirstLargest) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  Sampler s(SamplingParams{}, 1);
  EXPECT_EQ(s.next(logits.data(), 4), 1);
}

TEST(Sampler, TemperatureTopKAndTopPAsHf) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.0f, 3.0f, -2.0f};
  SamplingParams p;
  p.do_sample = true;
  p.top_k = 0;
  p.temperature = 0.7;
  std::vector<double> got = Sampler(p, 1).distribution(logits.data(), 6), want = softmax(logits, 0.7);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 1e-12) << i;
  // top_k 2: the two 3.0s; top_k 3 keeps the 2.0 as well.
  p.temperature = 1.0;
  p.top_k = 2;
  got = Sampler(p, 1).distribution(logits.data(), 6);
  EXPECT_NEAR(got[1], 0.5, 1e-12);
  EXPECT_NEAR(got[4], 0.5, 1e-12);
  EXPECT_EQ(got[0] + got[2] + got[3] + got[5], 0.0);
  // top_p: probabilities q (ascending) are dropped while their cumulative sum stays <= 1 - top_p.
  p.top_k = 0;
  p.top_p = 0.8;
  const std::vector<double> q = softmax(logits, 1.0);  // q[5] < q[3] < q[0] < q[2] < q[1] = q[4]
  ASSERT_LE(q[5] + q[3] + q[0], 0.2);
  ASSERT_GT(q[5] + q[3] + q[0] + q[2], 0.2);
  got = Sampler(p, 1).distribution(logits.data(), 6);
  const double kept = q[1] + q[2] + q[4];
  EXPECT_NEAR(got[1], q[1] / kept, 1e-12);
  EXPECT_NEAR(got[2], q[2] / kept, 1e-12);
  EXPECT_EQ(got[0] + got[3] + got[5], 0.0);
  // A tiny top_p still keeps the most likely token.
  p.top_p = 1e-9;
  got = Sampler(p, 1).distribution(logits.data(), 6);
  EXPECT_NEAR(got[1] + got[4], 1.0, 1e-12);
}

TEST(Sampler, DrawsFollowTheDistributionAndRepeatWithASeed) {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.do_sample = true;
  p.top_k = 0;
  Sampler a(p, 7), b(p, 7);
  const std::vector<double> want = softmax(logits, 1.0);
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = a.next(logits.data(), 4);
    ASSERT_EQ(x, b.next(logits.data(), 4));
    ++counts[size_t(x)];
  }
  for (int i = 0; i < 4; ++i) {
    // 5 standard deviations of a binomial count: fails by chance about once in 10^6 runs.
    const double sd = std::sqrt(n * want[size_t(i)] * (1 - want[size_t(i)]));
    EXPECT_NEAR(counts[size_t(i)], n * want[size_t(i)], 5 * sd) << i;
  }
}

}  // namespace
}  // namespace zt
