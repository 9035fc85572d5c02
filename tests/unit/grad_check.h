// Central finite differences in double precision, shared by the gradient tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "random_test_util.h"

namespace zt::testing {

inline std::vector<double> random_vector(size_t n, uint32_t seed, double scale = 1.0) {
  return randn<double>(n, seed, scale);
}

/// d loss / d x[i] by central differences, for every i (or a sample of `max_checks` indices).
/// Compares with `analytic` and fails with the index on a mismatch beyond `tolerance`
/// (relative to max(1, |value|)).
inline void expect_gradient_matches(std::vector<double>& x, const std::vector<double>& analytic,
                                    const std::function<double()>& loss, const char* what,
                                    double tolerance = 1e-6, size_t max_checks = 400) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-6;  // truncation O(h^2) and round-off O(eps/h) both well under 1e-6
  size_t stride = std::max<size_t>(1, x.size() / max_checks);
  size_t checked = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double scale = std::max(1.0, std::fabs(numeric));
    ASSERT_NEAR(analytic[i], numeric, tolerance * scale) << what << ": element " << i << " of " << x.size();
    ++checked;
  }
  EXPECT_GT(checked, 0u) << what;
}

/// sum(out * weights): a scalar loss whose gradient with respect to `out` is `weights`.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& weights) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * weights[i];
  return s;
}

}  // namespace zt::testing
