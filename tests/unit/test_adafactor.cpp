// Adafactor's pieces against values computed independently here: the CPU kernels' three passes
// against transformers' and torch's formulas in double (a matrix cut into pieces anywhere sums to
// what it sums whole), the step size and per-tensor scalars of both variants, and the config
// routes: HF's --optim adafactor with --optim_args, DeepSpeed's "Adafactor" block (torch's keys).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/ds_config.h"
#include "core/error.h"
#include "optim/adafactor.h"
#include "optim/optimizer.h"

namespace zt {
namespace {

std::vector<float> random_values(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

OptimizerStepArgs args_for(bool torch_variant) {
  OptimizerConfig o;
  o.type = OptimizerConfig::Type::kAdafactor;
  o.adafactor_torch = torch_variant;
  if (torch_variant) o.adafactor_eps1 = 1.1920928955078125e-07;
  o.adafactor_beta1 = 0.9;
  Optimizer rule(o);
  rule.begin_step(1e-2, 0, 0, 1.0);                 // t = 1
  return rule.begin_step(1e-2, 0, 0, 0.5);          // t = 2: beta2_t = 1 - 2^-0.8, grad scale 0.5
}

TEST(AdafactorKernels, SumsOfAMatrixCutAnywhereEqualItsWholeSums) {
  OptimizerOps& ops = host_optimizer_ops();
  const size_t rows = 7, cols = 13, n = rows * cols;
  const std::vector<float> g = random_values(n, 1, 1.0f);
  const OptimizerStepArgs a = args_for(false);
  std::vector<double> want_rows(rows, 0), want_cols(cols, 0);
  for (size_t i = 0; i < n; ++i) {
    const double x = double(g[i]) * a.grad_scale;
    want_rows[i / cols] += x * x + a.eps;
    want_cols[i % cols] += x * x + a.eps;
  }
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{0, n}, {0, 5, 6, 40, 52, n}, {0, 13, 26, 90, n}}) {
    std::vector<float> row_sums(rows, 0), col_sums(cols, 0);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      ops.adafactor_sums(a, g.data() + cuts[k], DType::kF32, cuts[k + 1] - cuts[k], cuts[k], cols, row_sums.data(),
                         col_sums.data());
    }
    for (size_t r = 0; r < rows; ++r) EXPECT_NEAR(row_sums[r], want_rows[r], 1e-6 * want_rows[r]) << "row " << r;
    for (size_t c = 0; c < cols; ++c) EXPECT_NEAR(col_sums[c], want_cols[c], 1e-6 * want_cols[c]) << "col " << c;
  }
}

// One step of a rows x cols matrix (and a vector) through the three passes against transformers'
// formula in double: row = b2 row + (1 - b2) mean_c(g^2 + eps) (col likewise), u = g
// rsqrt(row / mean(row)) rsqrt(col), m = b1 m + (1 - b1) scale u, w = w - decay w - m.
TEST(AdafactorKernels, ThreePassesFollowTheFormula) {
  OptimizerOps& ops = host_optimizer_ops();
  for (bool torch_variant : {false, true}) {
    const OptimizerStepArgs a = args_for(torch_variant);
    const size_t rows = 5, cols = 9, n = rows * cols;
    const std::vector<float> g = random_values(n, 2, 1e-2f), w0 = random_values(n, 3, 0.02f);
    std::vector<float> row = random_values(rows, 4, 1e-4f), col = random_values(cols, 5, 1e-4f);
    for (float& x : row) x = std::fabs(x);
    for (float& x : col) x = std::fabs(x);
    const std::vector<float> row0 = row, col0 = col;
    std::vector<float> sums(rows + cols, 0), scaled(rows), master = w0, m(n, 0.01f), param(n);
    // Two pieces, the cut inside a row.
    for (auto [lo, hi] : {std::pair<size_t, size_t>{0, 17}, {17, n}}) {
      ops.adafactor_sums(a, g.data() + lo, DType::kF32, hi - lo, lo, cols, sums.data(), sums.data() + rows);
    }
    ops.adafactor_factors(a, row.data(), col.data(), sums.data(), sums.data() + rows, rows, cols, scaled.data());
    std::vector<double> nsums(2, 0);
    AdafactorMoment v;
    v.scaled_row = scaled.data();
    v.col = col.data();
    v.cols = cols;
    ops.adafactor_norms(a, master.data(), v, g.data(), DType::kF32, n, nsums.data());
    const float scale = 0.03f, decay = 1e-3f;
    for (auto [lo, hi] : {std::pair<size_t, size_t>{0, 30}, {30, n}}) {
      AdafactorMoment piece = v;
      piece.first = lo;
      ops.adafactor_apply(a, scale, decay, master.data() + lo, m.data() + lo, piece, g.data() + lo, DType::kF32,
                          param.data() + lo, DType::kF32, hi - lo);
    }
    // The reference.
    const double b2 = a.beta2, floor = double(a.eps_floor) * a.eps_floor;
    std::vector<double> R(rows), C(cols);
    double mean = 0;
    for (size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (size_t c = 0; c < cols; ++c) s += std::pow(double(g[r * cols + c]) * a.grad_scale, 2) + a.eps;
      R[r] = b2 * row0[r] + (1 - b2) * s / double(cols);
      mean += R[r] / double(rows);
    }
    for (size_t c = 0; c < cols; ++c) {
      double s = 0;
      for (size_t r = 0; r < rows; ++r) s += std::pow(double(g[r * cols + c]) * a.grad_scale, 2) + a.eps;
      C[c] = b2 * col0[c] + (1 - b2) * s / double(rows);
    }
    mean = std::max(mean, double(a.eps_floor));
    double w2 = 0, u2 = 0;
    for (size_t i = 0; i < n; ++i) {
      const double u = double(g[i]) * a.grad_scale / std::sqrt(std::max(R[i / cols] / mean * C[i % cols], floor));
      const double mi = a.beta1 * 0.01 + (1 - a.beta1) * scale * u;
      const double w = w0[i] - decay * w0[i] - mi;
      w2 += double(w0[i]) * w0[i];
      u2 += u * u;
      EXPECT_NEAR(master[i], w, 1e-6 * std::fabs(mi) + 1e-9) << "element " << i << (torch_variant ? " (torch)" : "");
      EXPECT_EQ(param[i], master[i]);
      EXPECT_NEAR(m[i], mi, 1e-5 * std::fabs(mi)) << "element " << i;
    }
    for (size_t r = 0; r < rows; ++r) EXPECT_NEAR(row[r], R[r], 1e-5 * R[r]);
    for (size_t c = 0; c < cols; ++c) EXPECT_NEAR(col[c], C[c], 1e-5 * C[c]);
    EXPECT_NEAR(nsums[0], w2, 1e-9 * w2);
    EXPECT_NEAR(nsums[1], u2, 1e-5 * u2);
  }
}

TEST(AdafactorKernels, OneDimensionalTensorsKeepTheirSecondMomentElementByElement) {
  OptimizerOps& ops = host_optimizer_ops();
  const OptimizerStepArgs a = args_for(false);
  const size_t n = 37;
  const std::vector<float> g = random_values(n, 6, 1e-2f), w0 = random_values(n, 7, 0.1f);
  std::vector<float> sq(n, 1e-5f), master = w0, param(n);
  AdafactorMoment v;
  v.exp_avg_sq = sq.data();
  std::vector<double> sums(2, 0);
  ops.adafactor_norms(a, nullptr, v, g.data(), DType::kF32, n, sums.data());  // no weight norm asked
  EXPECT_EQ(sums[0], 0.0);
  ops.adafactor_apply(a, 0.5f, 0.0f, master.data(), nullptr, v, g.data(), DType::kF32, param.data(), DType::kF32, n);
  double u2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double gi = double(g[i]) * a.grad_scale;
    const double vi = a.beta2 * 1e-5 + (1 - a.beta2) * (gi * gi + a.eps);
    EXPECT_NEAR(sq[i], vi, 1e-6 * vi) << i;
    const double u = gi / std::sqrt(vi);
    u2 += u * u;
    EXPECT_NEAR(master[i], w0[i] - 0.5 * u, 1e-6) << i;
  }
  EXPECT_NEAR(sums[1], u2, 1e-5 * u2);
}

TEST(Adafactor, StepSizesAndPerTensorScalarsOfBothVariants) {
  OptimizerConfig hf;
  hf.type = OptimizerConfig::Type::kAdafactor;
  hf.weight_decay = 0.1;
  EXPECT_DOUBLE_EQ(adafactor_rho(hf, 1e-3, 7), 1e-3);  // HF's Trainer: the schedule's lr
  hf.relative_step = true;
  EXPECT_DOUBLE_EQ(adafactor_rho(hf, 1e-3, 1), 1e-2);
  EXPECT_DOUBLE_EQ(adafactor_rho(hf, 1e-3, 1000000), 1e-3);  // min(1e-2, 1/sqrt(t))
  hf.warmup_init = true;
  EXPECT_DOUBLE_EQ(adafactor_rho(hf, 1e-3, 3), 3e-6);
  // RMS(u) 2 over a clip threshold of 1 halves the step; RMS(w) 0.5 scales it when asked.
  hf.scale_parameter = false;
  AdafactorTensorStep s = adafactor_tensor_step(hf, 1e-2, 1e-3, 0.25 * 100, 4.0 * 100, 100);
  EXPECT_FLOAT_EQ(s.scale, 1e-2f / 2);
  EXPECT_FLOAT_EQ(s.decay, 0.1f * 1e-2f);
  hf.scale_parameter = true;
  s = adafactor_tensor_step(hf, 1e-2, 1e-3, 0.25 * 100, 0.25 * 100, 100);
  EXPECT_FLOAT_EQ(s.scale, 1e-2f * 0.5f);
  EXPECT_FLOAT_EQ(s.decay, 0.1f * 1e-2f * 0.5f);
  // torch: min(lr, 1/sqrt(t)), the weight's RMS floored at eps2, decay by the schedule's lr.
  OptimizerConfig torch_rule = hf;
  torch_rule.adafactor_torch = true;
  EXPECT_DOUBLE_EQ(adafactor_rho(torch_rule, 1e-2, 4), 1e-2);
  EXPECT_DOUBLE_EQ(adafactor_rho(torch_rule, 1.0, 4), 0.5);
  s = adafactor_tensor_step(torch_rule, 1e-2, 1e-2, 0.0, 9.0 * 100, 100);
  EXPECT_FLOAT_EQ(s.scale, float(1e-2 * 1e-3 / 3));
  EXPECT_FLOAT_EQ(s.decay, float(0.1 * 1e-2));
}

}  // namespace
}  // namespace zt
