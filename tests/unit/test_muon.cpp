// Muon's pieces against values computed independently here: the momentum and update kernels
// against the formula in double, Newton-Schulz (both methods, both orientations, square) against
// the quintic iteration in double, and the assignment of matrices to ranks (every matrix owned
// once, the ranks' work balanced, matrices left where they are when the balance allows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "config/ds_config.h"
#include "core/error.h"
#include "optim/newton_schulz.h"
#include "optim/optimizer.h"
#include "zero/muon_matrices.h"

namespace zt {
namespace {

// The quintic iteration of Keller Jordan's Muon in double, scaled by the stored shape.
std::vector<double> reference_ns(std::vector<double> g, size_t rows, size_t cols, int steps) {
  const bool tall = rows > cols;
  const size_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> x(m * n);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) (tall ? x[j * n + i] : x[i * n + j]) = g[i * cols + j];
  }
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (double& v : x) v /= norm;
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> A(m * m, 0), B(m * m), next(m * n, 0);
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < m; ++j) {
        for (size_t k = 0; k < n; ++k) A[i * m + j] += x[i * n + k] * x[j * n + k];
      }
    }
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < m; ++j) {
        double aa = 0;
        for (size_t k = 0; k < m; ++k) aa += A[i * m + k] * A[k * m + j];
        B[i * m + j] = b * A[i * m + j] + c * aa;
      }
    }
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < n; ++j) {
        double bx = 0;
        for (size_t k = 0; k < m; ++k) bx += B[i * m + k] * x[k * n + j];
        next[i * n + j] = a * x[i * n + j] + bx;
      }
    }
    x = next;
  }
  const double scale = std::sqrt(std::max(1.0, double(rows) / double(cols)));
  std::vector<double> out(rows * cols);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) out[i * cols + j] = scale * (tall ? x[j * n + i] : x[i * n + j]);
  }
  return out;
}

struct Shape {
  size_t rows, cols;
};

class NewtonSchulzTest : public ::testing::TestWithParam<std::tuple<OptimizerConfig::NsMethod, Shape>> {};

// The fp32 iteration on the CPU backend equals the double one to fp32's accuracy, for wide, tall
// and square matrices: Gram Newton-Schulz is the same polynomial rearranged.
TEST_P(NewtonSchulzTest, MatchesTheQuinticIterationInDouble) {
  const auto [method, shape] = GetParam();
  auto backend = make_cpu_backend();
  const size_t n = shape.rows * shape.cols;
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.37 * double(i) + 0.1 * double(i % 7)) + 0.3 * std::cos(0.05 * i);
  std::vector<float> x(g.begin(), g.end());
  NewtonSchulz ns(*backend, method, 5, n, std::min(shape.rows, shape.cols));
  ns.orthogonalize(x.data(), shape.rows, shape.cols);
  backend->synchronize();
  const std::vector<double> want = reference_ns(g, shape.rows, shape.cols, 5);
  double worst = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(double(x[i]) - want[i]));
    norm = std::max(norm, std::fabs(want[i]));
  }
  EXPECT_GT(norm, 0.1) << "the reference is degenerate";
  EXPECT_LT(worst, 2e-4 * norm) << shape.rows << " x " << shape.cols;
  // Not the identity nor a rescaling of its input: the singular values moved towards 1.
  double moved = 0;
  for (size_t i = 0; i < n; ++i) moved = std::max(moved, std::fabs(want[i] - g[i] * want[0] / g[0]));
  EXPECT_GT(moved, 0.05);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NewtonSchulzTest,
    ::testing::Combine(::testing::Values(OptimizerConfig::NsMethod::kGram, OptimizerConfig::NsMethod::kStandard),
                       ::testing::Values(Shape{12, 40}, Shape{40, 12}, Shape{24, 24}, Shape{7, 9})),
    [](const auto& info) {
      const Shape s = std::get<1>(info.param);
      return std::string(std::get<0>(info.param) == OptimizerConfig::NsMethod::kGram ? "gram_" : "standard_") +
             std::to_string(s.rows) + "x" + std::to_string(s.cols);
    });

// The two element-wise passes against the formula in double: Nesterov momentum, then
// w = w (1 - lr wd) - lr update; a bf16 parameter is the master weight rounded.
TEST(MuonKernels, MomentumAndApplyMatchTheFormula) {
  auto backend = make_cpu_backend();
  OptimizerStepArgs a;
  a.rule = UpdateRule::kMuon;
  a.momentum = 0.9f;
  a.muon_lr = 0.05f;
  a.lr = 1e-3f;  // AdamW's: must not enter Muon's update
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  const size_t n = 515;
  std::vector<float> m(n), grad(n), update(n), master(n);
  std::vector<uint16_t> param(n);
  std::vector<double> rm(n), rw(n);
  for (size_t i = 0; i < n; ++i) {
    rm[i] = m[i] = float(0.01 * std::cos(0.3 * double(i)));
    rw[i] = master[i] = float(0.02 * std::sin(0.7 * double(i)));
  }
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < n; ++i) grad[i] = float(std::sin(0.11 * double(i) + step));
    backend->optimizer_ops().muon_momentum(a, m.data(), grad.data(), DType::kF32, update.data(), n);
    backend->optimizer_ops().muon_apply(a, master.data(), update.data(), param.data(), DType::kBF16, n);
    for (size_t i = 0; i < n; ++i) {
      const double g = 0.5 * double(grad[i]);
      rm[i] = 0.9 * rm[i] + 0.1 * g;
      const double u = 0.1 * g + 0.9 * rm[i];
      ASSERT_NEAR(update[i], u, 1e-6) << "step " << step << " element " << i;
      rw[i] = rw[i] * (1 - 0.05 * 0.1) - 0.05 * double(update[i]);
      ASSERT_NEAR(master[i], rw[i], 1e-6) << "step " << step << " element " << i;
      ASSERT_EQ(param[i], to_bf16(master[i]).bits) << "element " << i;
    }
  }
}

// The offload steps a tensor in pieces wherever its swap pieces and the device/offload boundary
// cut it: each element's result must not depend on where its piece starts (the vector loop and its
// remainder must round alike), or an offloaded run would not equal the same run on the device.
TEST(MuonKernels, PiecesEqualTheWhole) {
  auto backend = make_cpu_backend();
  OptimizerStepArgs a;
  a.momentum = 0.95f, a.muon_lr = 0.02f, a.weight_decay = 0.1f, a.grad_scale = 0.37f;
  const size_t n = 1003;
  std::vector<float> grad(n), m0(n), w0(n), u0(n);
  for (size_t i = 0; i < n; ++i) {
    grad[i] = float(std::sin(0.31 * double(i)));
    m0[i] = float(0.1 * std::cos(0.17 * double(i)));
    w0[i] = float(0.05 * std::sin(0.7 * double(i) + 1));
    u0[i] = float(std::cos(0.23 * double(i)));
  }
  std::vector<float> m_whole = m0, u_whole(n), w_whole = w0;
  backend->optimizer_ops().muon_momentum(a, m_whole.data(), grad.data(), DType::kF32, u_whole.data(), n);
  backend->optimizer_ops().muon_apply(a, w_whole.data(), u0.data(), w_whole.data(), DType::kF32, n);
  for (size_t cut : {size_t(1), size_t(7), size_t(37), size_t(101), size_t(458), size_t(990)}) {
    // The update lands 3 elements further into its buffer than the momentum is into its own, as
    // an offloaded piece's do (the swap record and the range's update buffer align differently).
    std::vector<float> m = m0, u_shifted(n + 3), w = w0;
    float* u = u_shifted.data() + 3;
    for (size_t lo : {size_t(0), cut}) {
      const size_t hi = lo == 0 ? cut : n;
      backend->optimizer_ops().muon_momentum(a, m.data() + lo, grad.data() + lo, DType::kF32, u + lo, hi - lo);
      backend->optimizer_ops().muon_apply(a, w.data() + lo, u0.data() + lo, w.data() + lo, DType::kF32, hi - lo);
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(m[i], m_whole[i]) << "momentum " << i << ", cut at " << cut;
      ASSERT_EQ(u[i], u_whole[i]) << "update " << i << ", cut at " << cut;
      ASSERT_EQ(w[i], w_whole[i]) << "weight " << i << ", cut at " << cut;
    }
  }
}

// Optimizer::begin_step: both groups follow the schedule in proportion to lr; the AdamW group is
// bias-corrected with Muon's betas.
TEST(MuonArgs, BothLearningRatesFollowTheSchedule) {
  OptimizerConfig cfg;
  cfg.type = OptimizerConfig::Type::kMuon;
  cfg.lr = cfg.muon_lr = 0.02;
  cfg.adam_lr = 3e-4;
  cfg.momentum = 0.9;
  Optimizer opt(cfg);
  const OptimizerStepArgs a = opt.begin_step(0.01, 0.9, 0.95, 1.0);  // the schedule at half of lr
  EXPECT_EQ(a.rule, UpdateRule::kMuon);
  EXPECT_FLOAT_EQ(a.muon_lr, 0.01f);
  EXPECT_FLOAT_EQ(a.lr, 1.5e-4f);
  EXPECT_FLOAT_EQ(a.momentum, 0.9f);
  EXPECT_FLOAT_EQ(a.bias_correction2, float(1 - 0.95));
  EXPECT_TRUE(cfg.aux_exp_avg_sq());
}

// A layout of `blocks` blocks of four matrices (GPT-2's shapes at width c) between an embedding
// and a norm; the ranges are packed one after another.
void toy_layout(int blocks, size_t c, std::vector<std::pair<size_t, size_t>>& tensors,
                std::vector<TensorShape>& shapes) {
  size_t at = 0;
  auto add = [&](size_t rows, size_t cols, bool hidden) {
    tensors.emplace_back(at, at + rows * (cols ? cols : 1));
    shapes.push_back({cols ? rows : 0, cols, hidden});
    at += rows * (cols ? cols : 1);
  };
  add(50 * c, c, false);  // wte
  for (int b = 0; b < blocks; ++b) {
    add(c, 0, false);
    add(c, 3 * c, true);
    add(c, c, true);
    add(c, 4 * c, true);
    add(4 * c, c, true);
  }
  add(c, 0, false);
}

std::vector<std::pair<size_t, size_t>> split(size_t total, int world) {
  std::vector<std::pair<size_t, size_t>> held;
  const size_t part = (total + size_t(world) - 1) / size_t(world);
  for (int r = 0; r < world; ++r) held.emplace_back(std::min(total, r * part), std::min(total, (r + 1) * part));
  return held;
}

TEST(MuonMatrices, EachMatrixHasOneOwnerAndTheWorkIsBalanced) {
  std::vector<std::pair<size_t, size_t>> tensors;
  std::vector<TensorShape> shapes;
  toy_layout(12, 64, tensors, shapes);
  OptimizerConfig opt;
  opt.type = OptimizerConfig::Type::kMuon;
  for (int world : {1, 2, 3, 4, 8}) {
    for (bool replicated : {false, true}) {
      const auto held = replicated ? std::vector<std::pair<size_t, size_t>>(size_t(world), {0, tensors.back().second})
                                   : split(tensors.back().second, world);
      const auto matrices = MuonMatrices::assign(tensors, shapes, held, opt);
      ASSERT_EQ(matrices.size(), 48u);
      std::vector<double> load(size_t(world), 0.0);
      double largest = 0;
      size_t stayed = 0, could_stay = 0;
      for (const auto& m : matrices) {
        ASSERT_GE(m.owner, 0);
        ASSERT_LT(m.owner, world);
        EXPECT_TRUE(shapes[m.tensor].hidden_matrix);
        const double c = NewtonSchulz::cost(opt.ns_method, opt.ns_steps, m.rows, m.cols);
        load[size_t(m.owner)] += c;
        largest = std::max(largest, c);
        const auto& h = held[size_t(m.owner)];
        could_stay += !replicated;
        stayed += !replicated && h.first <= m.lo && m.hi <= h.second;
      }
      const double total = std::accumulate(load.begin(), load.end(), 0.0);
      const double most = *std::max_element(load.begin(), load.end());
      // No rank's share exceeds the even share by more than one matrix.
      EXPECT_LE(most, total / world + largest) << world << " ranks" << (replicated ? ", stage 0" : "");
      // The embedding sits on the first ranks, so their matrices move to them only as far as the
      // balance needs: at least half stay where they are.
      if (!replicated && world > 1) EXPECT_GE(2 * stayed, could_stay) << world << " ranks";
    }
  }
  // No hidden matrix: refused, naming the reason.
  std::vector<TensorShape> flat(shapes.size());
  try {
    MuonMatrices::assign(tensors, flat, split(tensors.back().second, 2), opt);
    ADD_FAILURE() << "a model without hidden matrices was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Muon needs hidden 2-D weight matrices"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt
