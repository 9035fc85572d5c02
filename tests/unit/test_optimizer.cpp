// Adam/AdamW, every LR schedule and the loss scaler against values computed independently
// here, from the formulas in DeepSpeed's documentation and source.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "config/ds_config.h"
#include "core/error.h"
#include "optim/onebit_lamb.h"
#include "optim/optimizer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"

namespace zt {
namespace {

// Reference Adam in double: PyTorch's documented algorithm (L2 in the gradient for Adam,
// decoupled decay for AdamW), bias-corrected.
struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool adamw;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i] + (adamw ? 0.0 : wd * w[i]);
      if (adamw) w[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// One step's gradient for the kernels: cos(0.11 i + step) x loss_scale rounded to `dtype` (in
// grad32 or grad16), and in `exact` the value the kernel must see after unscaling, in double.
// With zero_first, element 0's gradient is exactly 0.
void scaled_grads(DType dtype, int step, double loss_scale, bool zero_first, std::vector<float>& grad32,
                  std::vector<uint16_t>& grad16, std::vector<double>& exact) {
  for (size_t i = 0; i < exact.size(); ++i) {
    const float scaled = zero_first && i == 0 ? 0.0f : float(std::cos(0.11 * double(i) + step) * loss_scale);
    if (dtype == DType::kBF16) {
      grad16[i] = to_bf16(scaled).bits;
      exact[i] = to_float(bf16{grad16[i]}) / loss_scale;
    } else if (dtype == DType::kF16) {
      grad16[i] = to_fp16(scaled).bits;
      exact[i] = to_float(fp16{grad16[i]}) / loss_scale;
    } else {
      grad32[i] = scaled;
      exact[i] = scaled / loss_scale;
    }
  }
}

class AdamTest : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(AdamTest, MatchesReference) {
  const auto [adamw, grad_dtype] = GetParam();
  auto backend = make_cpu_backend();
  OptimizerConfig cfg;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  cfg.adam_w_mode = adamw;
  Optimizer adam(cfg);
  const size_t n = 1000;
  std::vector<float> master(n), m(n, 0), v(n, 0);
  std::vector<double> ref_w(n);
  for (size_t i = 0; i < n; ++i) ref_w[i] = master[i] = std::sin(0.37 * double(i));
  RefAdam ref{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, adamw, std::vector<double>(n, 0), std::vector<double>(n, 0)};
  std::vector<float> grad32(n);
  std::vector<uint16_t> grad16(n);
  std::vector<uint16_t> param16(n);
  for (int step = 0; step < 5; ++step) {
    std::vector<double> g(n);
    const double loss_scale = 8.0;  // the kernel unscales: grad_scale = 1 / loss_scale
    scaled_grads(grad_dtype, step, loss_scale, false, grad32, grad16, g);
    ref.step(ref_w, g);
    OptimizerStepArgs args = adam.begin_step(cfg.lr, cfg.beta1, cfg.beta2, 1.0 / loss_scale);
    const void* grad = grad_dtype == DType::kF32 ? static_cast<const void*>(grad32.data()) : grad16.data();
    void* param = grad_dtype == DType::kF32 ? static_cast<void*>(master.data()) : param16.data();
    backend->optimizer_ops().adam_step(args, master.data(), m.data(), v.data(), grad, grad_dtype, param, grad_dtype, n);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(master[i], ref_w[i], 2e-5) << "element " << i;
    if (grad_dtype == DType::kBF16) {
      ASSERT_EQ(param16[i], to_bf16(master[i]).bits) << "bf16 param " << i;
    }
    if (grad_dtype == DType::kF16) {
      ASSERT_EQ(param16[i], to_fp16(master[i]).bits) << "fp16 param " << i;
    }
  }
  EXPECT_EQ(adam.step_count(), 5);
}

INSTANTIATE_TEST_SUITE_P(Modes, AdamTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(DType::kF32, DType::kBF16, DType::kF16)));

TEST(Adam, NoBiasCorrection) {
  OptimizerConfig cfg;
  cfg.bias_correction = false;
  Optimizer adam(cfg);
  OptimizerStepArgs a = adam.begin_step(1e-3, 0.9, 0.999, 1.0);
  EXPECT_EQ(a.bias_correction1, 1.0f);
  EXPECT_EQ(a.bias_correction2, 1.0f);
  OptimizerConfig with;
  Optimizer adam2(with);
  adam2.begin_step(1e-3, 0.9, 0.999, 1.0);
  OptimizerStepArgs b = adam2.begin_step(1e-3, 0.9, 0.999, 1.0);
  EXPECT_FLOAT_EQ(b.bias_correction1, float(1 - 0.9 * 0.9));
  EXPECT_FLOAT_EQ(b.bias_correction2, float(1 - 0.999 * 0.999));
}

// Lion in double: the paper's Algorithm 2 (decoupled decay), sign(0) = 0.
struct RefLion {
  double lr, b1, b2, wd;
  std::vector<double> m;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double c = b1 * m[i] + (1 - b1) * g[i];
      w[i] = w[i] * (1 - lr * wd) - lr * double((c > 0) - (c < 0));
      m[i] = b2 * m[i] + (1 - b2) * g[i];
    }
  }
};

// Adagrad in double: torch.optim.Adagrad's documented algorithm (L2 decay, lr_decay).
struct RefAdagrad {
  double lr, lr_decay, eps, wd;
  std::vector<double> sum;
  int t = 0;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    ++t;
    const double clr = lr / (1 + (t - 1) * lr_decay);
    for (size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] + wd * w[i];
      sum[i] += gi * gi;
      w[i] -= clr * gi / (std::sqrt(sum[i]) + eps);
    }
  }
};

// Five steps of `type` through OptimizerOps::step on the CPU backend against `reference`, with
// 16-bit or fp32 gradients and a loss scale the kernel takes out. Element 0's gradient is always
// 0 (with Lion's zero momentum its sign is 0: the weight moves by its decay alone).
template <typename Ref>
void check_against_reference(OptimizerConfig::Type type, DType dtype, Ref ref, double tolerance) {
  auto backend = make_cpu_backend();
  OptimizerConfig cfg;
  cfg.type = type;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  cfg.lr_decay = 0.05;
  Optimizer opt(cfg);
  const size_t n = 1003;  // not a multiple of any vector width
  std::vector<float> master(n), m(n, 0), v(n, 0), grad32(n);
  std::vector<uint16_t> grad16(n), param16(n);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = master[i] = float(std::sin(0.37 * double(i)));
  for (int step = 0; step < 5; ++step) {
    const double loss_scale = 8.0;
    std::vector<double> g(n);
    scaled_grads(dtype, step, loss_scale, true, grad32, grad16, g);
    ref.step(w, g);
    const OptimizerStepArgs args = opt.begin_step(cfg.lr, cfg.beta1, cfg.beta2, 1.0 / loss_scale);
    const void* grad = dtype == DType::kF32 ? static_cast<const void*>(grad32.data()) : grad16.data();
    void* param = dtype == DType::kF32 ? static_cast<void*>(master.data()) : param16.data();
    backend->optimizer_ops().step(args, master.data(), m.data(), v.data(), grad, dtype, param, dtype, n);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(master[i], w[i], tolerance) << "element " << i;
    if (dtype == DType::kBF16) {
      ASSERT_EQ(param16[i], to_bf16(master[i]).bits) << "bf16 param " << i;
    } else if (dtype == DType::kF16) {
      ASSERT_EQ(param16[i], to_fp16(master[i]).bits) << "fp16 param " << i;
    }
  }
  // The moment the rule does not keep is never written.
  const std::vector<float>& unused = type == OptimizerConfig::Type::kLion ? v : m;
  EXPECT_EQ(std::count(unused.begin(), unused.end(), 0.0f), std::ptrdiff_t(n));
}

class ElementwiseRules : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseRules, LionMatchesThePaper) {
  // Lion's update is +-lr exactly: a sign that flips only when c is within rounding of 0, which
  // these gradients never are, so the fp32 kernel lands within rounding of the double reference.
  check_against_reference(OptimizerConfig::Type::kLion, GetParam(),
                          RefLion{1e-2, 0.8, 0.95, 0.1, std::vector<double>(1003, 0.0)}, 1e-6);
}

TEST_P(ElementwiseRules, AdagradMatchesTorch) {
  check_against_reference(OptimizerConfig::Type::kAdagrad, GetParam(),
                          RefAdagrad{1e-2, 0.05, 1e-6, 0.1, std::vector<double>(1003, 0.0)}, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ElementwiseRules, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Lamb in double, as DeepSpeed's FusedLamb computes it for one tensor (eps outside the root,
// bias correction folded into the step size, the trust ratio clamped).
struct RefLamb {
  double lr, b1, b2, eps, wd, max_coeff, min_coeff;
  std::vector<double> m, v;
  int t = 0;
  double last_ratio = 0;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    ++t;
    std::vector<double> u(w.size());
    double w2 = 0, u2 = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      u[i] = m[i] / (std::sqrt(v[i]) + eps) + wd * w[i];
      w2 += w[i] * w[i];
      u2 += u[i] * u[i];
    }
    last_ratio = std::clamp(std::sqrt(w2) / std::sqrt(u2), min_coeff, max_coeff);
    const double step = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < w.size(); ++i) w[i] -= step * last_ratio * u[i];
  }
};

class LambKernels : public ::testing::TestWithParam<DType> {};

// Five steps of the two passes on the CPU backend, the trust ratio from the first pass's sums
// exactly as the engine forms it, against the double reference; with a max_coeff that the
// ratio passes on some steps and not on others.
TEST_P(LambKernels, MatchFusedLambsFormula) {
  const DType dtype = GetParam();
  auto backend = make_cpu_backend();
  OptimizerConfig cfg;
  cfg.type = OptimizerConfig::Type::kLamb;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  cfg.max_coeff = 0.045;  // the ratios here run from 0.038 to 0.076: clamped on some steps only
  Optimizer opt(cfg);
  const size_t n = 1003;
  std::vector<float> master(n), m(n, 0), v(n, 0), grad32(n);
  std::vector<uint16_t> grad16(n), param16(n);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = master[i] = float(0.05 * std::sin(0.37 * double(i)));
  RefLamb ref{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.max_coeff, cfg.min_coeff,
              std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  int clamped = 0;
  for (int step = 0; step < 5; ++step) {
    const double loss_scale = 4.0;
    std::vector<double> g(n);
    scaled_grads(dtype, step, loss_scale, false, grad32, grad16, g);
    ref.step(w, g);
    clamped += ref.last_ratio == cfg.max_coeff;
    const OptimizerStepArgs args = opt.begin_step(cfg.lr, cfg.beta1, cfg.beta2, 1.0 / loss_scale);
    const void* grad = dtype == DType::kF32 ? static_cast<const void*>(grad32.data()) : grad16.data();
    double sums[2] = {0, 0};
    backend->optimizer_ops().lamb_moments(args, master.data(), m.data(), v.data(), grad, dtype, n, sums);
    const float ratio = float(std::clamp(std::sqrt(sums[0]) / std::sqrt(sums[1]), cfg.min_coeff, cfg.max_coeff));
    EXPECT_NEAR(ratio, ref.last_ratio, 1e-5 * ref.last_ratio) << "step " << step + 1;
    void* param = dtype == DType::kF32 ? static_cast<void*>(master.data()) : param16.data();
    backend->optimizer_ops().lamb_apply(args, ratio, master.data(), m.data(), v.data(), param, dtype, n);
  }
  EXPECT_GT(clamped, 0) << "max_coeff never acted: the clamp is untested";
  EXPECT_LT(clamped, 5) << "max_coeff always acted: the ratio is untested";
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(master[i], w[i], 2e-6) << "element " << i;
    if (dtype == DType::kBF16) {
      ASSERT_EQ(param16[i], to_bf16(master[i]).bits) << "bf16 param " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LambKernels, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// DeepSpeed 0.19.6's OnebitLamb on one rank (nothing compressed), written out in double over two
// tensors, against the CPU kernels and optim/onebit_lamb.h as the engine strings them together:
// step 1 sets up, 2 and 3 are Lamb's warm-up (freeze_step 3: exp_avg_sq_fresh copied at 3), and
// 4 to 8 step with the frozen ratio's average times the factor. The second tensor's first 7
// elements never have a gradient: their momentum is masked (exp_avg_sq 0), only decay moves them.
TEST(OneBitLamb, MatchesDeepSpeedsFormulasOnOneRank) {
  auto backend = make_cpu_backend();
  OptimizerConfig cfg;
  cfg.type = OptimizerConfig::Type::kOneBitLamb;
  cfg.bias_correction = false;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  cfg.freeze_step = 3;
  cfg.coeff_beta = 0.5;
  cfg.factor_threshold = 0.05;  // acts: the factor would move further than 5% a step
  Optimizer opt(cfg);
  const std::vector<std::pair<size_t, size_t>> tensors{{0, 301}, {301, 508}};
  const size_t n = 508;
  std::vector<float> master(n), m(n, 0), v(n, 0), fresh(n, 0), grad(n), x(n);
  std::vector<double> w(n), rm(n, 0), rv(n, 0), rf(n, 0);
  for (size_t i = 0; i < n; ++i) w[i] = master[i] = float(0.05 * std::sin(0.37 * double(i)) + 0.01);
  std::vector<OneBitLambTensor> ours(2);
  std::vector<double> cf(2, 0.0), last(2, 1.0), sc(2, 0.0);
  int thresholded = 0;  // compressed steps whose factor the threshold held back
  const auto gradient = [](int step, size_t i) {
    return i >= 301 && i < 308 ? 0.0f : float(0.02 * std::cos(0.11 * double(i) * (step + 1)) + 0.003 * step);
  };
  for (int t = 1; t <= 8; ++t) {
    for (size_t i = 0; i < n; ++i) grad[i] = gradient(t, i);
    const OptimizerStepArgs args = opt.begin_step(cfg.lr, cfg.beta1, cfg.beta2, 1.0);
    ASSERT_EQ(onebit_compressed(cfg, t), t >= 4) << t;
    if (t == 1) continue;
    const bool warm = t <= 3;
    // The reference.
    if (!warm && sc[0] == 0) {
      double united = 0;
      std::vector<double> rms(2);
      for (size_t k = 0; k < 2; ++k) {
        double s2 = 0;
        for (size_t i = tensors[k].first; i < tensors[k].second; ++i) s2 += rm[i] * rm[i];
        rms[k] = std::sqrt(s2 / double(tensors[k].second - tensors[k].first));
        united += rms[k] / 2;
      }
      for (size_t k = 0; k < 2; ++k) sc[k] = united / rms[k];
    }
    for (size_t k = 0; k < 2; ++k) {
      const auto [lo, hi] = tensors[k];
      std::vector<double> u(hi - lo), pre(hi - lo);
      double w2 = 0, u2 = 0, p2 = 0, worst = 0;
      for (size_t i = lo; i < hi; ++i) {
        const double g = grad[i];
        if (warm) {
          rm[i] = cfg.beta1 * rm[i] + (1 - cfg.beta1) * g;
          rv[i] = cfg.beta2 * rv[i] + (1 - cfg.beta2) * g * g;
          if (t == 3) rf[i] = rv[i];
        } else {
          const double mi = rv[i] == 0 ? 0.0 : cfg.beta1 * rm[i] + (1 - cfg.beta1) * g;
          const double r = (mi - cfg.beta1 * rm[i]) / (1 - cfg.beta1);
          rf[i] = cfg.beta2 * rf[i] + (1 - cfg.beta2) * r * r;
          rm[i] = mi;
        }
        const double d = std::sqrt(rv[i]) + cfg.eps;
        pre[i - lo] = rm[i] / d;
        u[i - lo] = pre[i - lo] + cfg.weight_decay * w[i];
        w2 += w[i] * w[i];
        u2 += u[i - lo] * u[i - lo];
        p2 += pre[i - lo] * pre[i - lo];
        worst = std::max(worst, d / (std::sqrt(rf[i]) + cfg.eps));
      }
      double coeff = 0;
      if (warm) {
        coeff = std::clamp(std::sqrt(w2) / std::sqrt(u2), cfg.min_coeff, cfg.max_coeff);
        cf[k] = cfg.coeff_beta * cf[k] + (1 - cfg.coeff_beta) * coeff;
      } else {
        const double ratio = std::min(1.0, std::sqrt(p2) / std::sqrt(u2));
        double f = std::clamp(worst * ratio + (1 - ratio), cfg.factor_min, cfg.factor_max);
        const double held = std::clamp(f, last[k] * (1 - cfg.factor_threshold), last[k] * (1 + cfg.factor_threshold));
        thresholded += held != f;
        last[k] = f = held;
        coeff = cf[k] * f;
      }
      for (size_t i = lo; i < hi; ++i) w[i] -= cfg.lr * coeff * u[i - lo];
    }
    // Ours.
    OptimizerOps& ops = backend->optimizer_ops();
    std::vector<float> coeffs(2);
    if (warm) {
      for (size_t k = 0; k < 2; ++k) {
        const auto [lo, hi] = tensors[k];
        double sums[2] = {0, 0};
        ops.lamb_moments(args, master.data() + lo, m.data() + lo, v.data() + lo, grad.data() + lo, DType::kF32,
                         hi - lo, sums);
        coeffs[k] = float(lamb_trust_ratio(cfg, sums[0], sums[1]));
        onebit_lamb_observe(cfg, coeffs[k], ours[k]);
      }
      if (t == cfg.freeze_step) fresh = v;
    } else {
      if (ours[0].scaling == 0) {
        std::vector<double> sq(2, 0.0);
        for (size_t k = 0; k < 2; ++k) {
          ops.sum_squares(m.data() + tensors[k].first, DType::kF32, tensors[k].second - tensors[k].first, &sq[k]);
        }
        onebit_lamb_set_scaling(sq, {301, 207}, ours);
        EXPECT_NEAR(ours[0].scaling, sc[0], 1e-5 * sc[0]);
        EXPECT_NEAR(ours[1].scaling, sc[1], 1e-5 * sc[1]);
      }
      for (size_t k = 0; k < 2; ++k) {
        const auto [lo, hi] = tensors[k];
        const float scale = float(ours[k].scaling);
        ops.onebit_lamb_momentum(args, scale, m.data() + lo, grad.data() + lo, DType::kF32, x.data() + lo, hi - lo);
        double sums[3] = {0, 0, 0};
        ops.onebit_lamb_stats(args, scale, master.data() + lo, m.data() + lo, v.data() + lo, fresh.data() + lo,
                              x.data() + lo, hi - lo, sums);
        coeffs[k] = float(onebit_lamb_coefficient(cfg, sums[0], sums[1], sums[2], ours[k]));
        EXPECT_NEAR(ours[k].last_factor, last[k], 1e-5) << "step " << t << " tensor " << k;
      }
    }
    for (size_t k = 0; k < 2; ++k) {
      const auto [lo, hi] = tensors[k];
      ops.lamb_apply(args, coeffs[k], master.data() + lo, m.data() + lo, v.data() + lo, master.data() + lo,
                     DType::kF32, hi - lo);
      EXPECT_NEAR(ours[k].coeff_freeze, cf[k], 1e-6 * cf[k]) << "step " << t << " tensor " << k;
    }
  }
  EXPECT_GT(thresholded, 0) << "factor_threshold never acted";
  EXPECT_LT(thresholded, 10) << "factor_threshold always acted: the factor itself is untested";
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(master[i], w[i], 2e-6 * std::max(1.0, std::fabs(w[i]))) << "element " << i;
  for (size_t i = 301; i < 308; ++i) EXPECT_EQ(m[i], 0.0f) << "masked element " << i;
}

// Lamb's ratio is 1 where either norm is 0; such a ratio (and exactly 1) leaves the average
// alone, as DeepSpeed skips it; a momentum of zero RMS gets scaling 1, not DeepSpeed's inf.
TEST(OneBitLamb, ScalarsEdgeCases) {
  OptimizerConfig cfg;
  cfg.type = OptimizerConfig::Type::kOneBitLamb;
  EXPECT_EQ(lamb_trust_ratio(cfg, 0.0, 4.0), 1.0);
  EXPECT_EQ(lamb_trust_ratio(cfg, 4.0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(lamb_trust_ratio(cfg, 4.0, 1.0), 2.0);
  EXPECT_DOUBLE_EQ(lamb_trust_ratio(cfg, 1e6, 1.0), cfg.max_coeff);
  OneBitLambTensor k;
  onebit_lamb_observe(cfg, 1.0, k);
  EXPECT_EQ(k.coeff_freeze, 0.0);
  onebit_lamb_observe(cfg, 2.0, k);
  EXPECT_DOUBLE_EQ(k.coeff_freeze, 0.2);  // (1 - 0.9) x 2
  std::vector<OneBitLambTensor> ts(3);
  onebit_lamb_set_scaling({4.0, 0.0, 64.0}, {4, 9, 4}, ts);  // RMS 1, 0, 4: united 5/3
  EXPECT_DOUBLE_EQ(ts[0].scaling, 5.0 / 3.0);
  EXPECT_EQ(ts[1].scaling, 1.0);
  EXPECT_DOUBLE_EQ(ts[2].scaling, 5.0 / 12.0);
  // The factor: mixed by the prelim's share of the update, clamped, then kept within 10% of the
  // last; 0/0 (no update at all) counts as a share of 1.
  OneBitLambTensor f{2.0, 1.0, 1.0};
  cfg.weight_decay = 0.1;
  EXPECT_DOUBLE_EQ(onebit_lamb_coefficient(cfg, 4.0, 1.0, 3.0, f), 2.0 * 1.1);  // 3 x 0.5 + 0.5 = 2 -> 1.1
  EXPECT_DOUBLE_EQ(f.last_factor, 1.1);
  EXPECT_DOUBLE_EQ(onebit_lamb_coefficient(cfg, 0.0, 0.0, 1.05, f), 2.0 * 1.05);
  cfg.factor_threshold = 1.0;
  EXPECT_DOUBLE_EQ(onebit_lamb_coefficient(cfg, 1.0, 1.0, 0.1, f), 2.0 * cfg.factor_min);
}

TEST(ElementwiseRules, ArgsCarryTheRule) {
  OptimizerConfig cfg;
  cfg.type = OptimizerConfig::Type::kAdagrad;
  cfg.lr_decay = 0.5;
  Optimizer opt(cfg);
  EXPECT_EQ(opt.begin_step(0.1, 0.9, 0.999, 1.0).rule, UpdateRule::kAdagrad);
  const OptimizerStepArgs second = opt.begin_step(0.1, 0.9, 0.999, 1.0);
  EXPECT_FLOAT_EQ(second.lr, float(0.1 / 1.5));    // lr / (1 + (t - 1) lr_decay) at t = 2
  EXPECT_EQ(second.bias_correction1, 1.0f);        // Adam's alone
  cfg.type = OptimizerConfig::Type::kLion;
  EXPECT_EQ(Optimizer(cfg).begin_step(0.1, 0.9, 0.99, 1.0).rule, UpdateRule::kLion);
  EXPECT_EQ(cfg.moment_count(), 1);
  EXPECT_TRUE(cfg.has_exp_avg());
  EXPECT_FALSE(cfg.has_exp_avg_sq());
}

TEST(Clipping, Coefficient) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_NEAR(clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-15);
  EXPECT_EQ(clip_coefficient(100.0, 0.0), 1.0);  // 0 disables
}

// ---- schedules: lr used by optimizer step k (1-based) is value_at(k - 2) ----

SchedulerConfig warmup(SchedulerConfig::Type type, bool log) {
  SchedulerConfig c;
  c.type = type;
  c.warmup_min_lr = 1e-4;
  c.warmup_max_lr = 1e-2;
  c.warmup_num_steps = 10;
  c.warmup_type_log = log;
  c.total_num_steps = 30;
  return c;
}

TEST(Schedulers, WarmupLRLogAndLinear) {
  for (bool log : {true, false}) {
    LrScheduler s(warmup(SchedulerConfig::Type::kWarmupLR, log), 5e-3);
    EXPECT_DOUBLE_EQ(s.values_at(-1).lr, 1e-4);  // the first step runs at warmup_min_lr
    for (int it = 0; it < 40; ++it) {
      double gamma = it < 10 ? (log ? std::log(it + 1.0) / std::log(10.0) : it / 10.0) : 1.0;
      EXPECT_NEAR(s.values_at(it).lr, 1e-4 + (1e-2 - 1e-4) * gamma, 1e-15) << it;
    }
  }
}

TEST(Schedulers, WarmupLRDefaultsMaxToOptimizerLr) {
  SchedulerConfig c = warmup(SchedulerConfig::Type::kWarmupLR, false);
  c.warmup_max_lr.reset();
  LrScheduler s(c, 5e-3);
  EXPECT_DOUBLE_EQ(s.values_at(100).lr, 5e-3);
}

TEST(Schedulers, WarmupDecayLR) {
  LrScheduler s(warmup(SchedulerConfig::Type::kWarmupDecayLR, false), 0);
  for (int it = 10; it < 40; ++it) {
    double gamma = std::max(0.0, (30.0 - it) / 20.0);
    EXPECT_NEAR(s.values_at(it).lr, 1e-4 + (1e-2 - 1e-4) * gamma, 1e-15) << it;
  }
  EXPECT_DOUBLE_EQ(s.values_at(30).lr, 1e-4);
}

TEST(Schedulers, WarmupCosineLR) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kWarmupCosineLR;
  c.total_num_steps = 50;
  c.warmup_num_steps = 5;
  c.warmup_min_ratio = 0.1;
  c.cos_min_ratio = 0.01;
  c.warmup_type_log = false;
  LrScheduler s(c, 2.0);
  EXPECT_DOUBLE_EQ(s.values_at(-1).lr, 0.0);
  for (int it = 0; it < 60; ++it) {
    double ratio;
    if (it < 5) {
      ratio = 0.1 + (it / 5.0) * 0.9;
    } else {
      // DeepSpeed 0.19 clamps the progress at 1: past total_num_steps the ratio stays at the floor.
      double x = std::min(1.0, double(it - 5 + 1) / 45.0);
      ratio = std::max(0.0, 0.01 + 0.99 * (1 + std::cos(M_PI * x)) / 2);
    }
    EXPECT_NEAR(s.values_at(it).lr, 2.0 * ratio, 1e-13) << it;
  }
  EXPECT_DOUBLE_EQ(s.values_at(49).lr, 2.0 * 0.01);  // the last step of the decay reaches the floor
  EXPECT_DOUBLE_EQ(s.values_at(80).lr, 2.0 * 0.01);  // and stays there
}

TEST(Schedulers, OneCycleLrAndMomentum) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kOneCycle;
  c.cycle_min_lr = 1e-4;
  c.cycle_max_lr = 1e-3;
  c.cycle_first_step_size = 4;
  c.cycle_second_step_size = 6;
  c.decay_step_size = 2;
  c.decay_lr_rate = 0.5;
  c.decay_mom_rate = 0.1;
  LrScheduler s(c, 0);
  ScheduledValues init = s.values_at(-1);
  EXPECT_DOUBLE_EQ(init.lr, 1e-4);
  EXPECT_DOUBLE_EQ(*init.beta1, 0.8);
  EXPECT_DOUBLE_EQ(*init.beta2, 0.99);
  for (int it = 0; it < 10; ++it) {
    double bi = it + 1, x = bi / 10.0 - std::floor(bi / 10.0);
    double scale = x <= 0.4 ? x / 0.4 : (x - 1) / (0.4 - 1);
    ScheduledValues v = s.values_at(it);
    EXPECT_NEAR(v.lr, 1e-4 + 9e-4 * scale, 1e-15) << it;
    EXPECT_NEAR(*v.beta1, 0.9 - 0.1 * scale, 1e-15) << it;
  }
  for (int it = 10; it < 16; ++it) {
    double interval = (it - 10 + 1) / 2.0;
    ScheduledValues v = s.values_at(it);
    EXPECT_NEAR(v.lr, 1e-4 / (1 + 0.5 * interval), 1e-15) << it;
    EXPECT_NEAR(*v.beta1, 0.9 * (1 + 0.1 * interval), 1e-15) << it;
  }
}

TEST(Schedulers, LRRangeTest) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kLRRangeTest;
  c.lr_range_test_min_lr = 1e-5;
  c.lr_range_test_step_size = 4;
  c.lr_range_test_step_rate = 2.0;
  LrScheduler cont(c, 0);
  c.lr_range_test_staircase = true;
  LrScheduler stair(c, 0);
  EXPECT_DOUBLE_EQ(cont.values_at(-1).lr, 1e-5);
  for (int it = 0; it < 12; ++it) {
    EXPECT_NEAR(cont.values_at(it).lr, 1e-5 * (1 + 2.0 * (it + 1) / 4.0), 1e-18);
    EXPECT_NEAR(stair.values_at(it).lr, 1e-5 * (1 + 2.0 * std::floor((it + 1) / 4.0)), 1e-18);
  }
}

TEST(Schedulers, StepAdvances) {
  LrScheduler s(warmup(SchedulerConfig::Type::kWarmupLR, false), 0);
  EXPECT_DOUBLE_EQ(s.current().lr, s.values_at(-1).lr);
  s.step();
  s.step();
  EXPECT_EQ(s.last_batch_iteration(), 1);
  EXPECT_DOUBLE_EQ(s.current().lr, s.values_at(1).lr);
}

// ---- loss scaler: a direct re-statement of DeepSpeed's DynamicLossScaler ----

TEST(LossScaler, DynamicWithHysteresis) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 0;
  c.initial_scale_power = 4;  // 16
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  c.min_loss_scale = 2;
  LossScaler s(c);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // hysteresis absorbs the first overflow
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // the second halves
  EXPECT_EQ(s.scale(), 8);
  s.update(false);  // iter 2, last overflow 1: (2-1) % 3 != 0
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);  // iter 4: (4-1) % 3 == 0 -> double, hysteresis reset
  EXPECT_EQ(s.scale(), 16);
  s.update(true);
  EXPECT_EQ(s.scale(), 16);  // reset hysteresis absorbs again
  s.update(true);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 2);  // 16 -> 8 -> 4 -> 2, floored at min_loss_scale
  EXPECT_THROW(s.update(true), Error);  // already at the minimum, as DeepSpeed raises
}

TEST(LossScaler, StaticAndDisabled) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 128;
  LossScaler fixed(c);
  EXPECT_FALSE(fixed.dynamic());
  fixed.update(true);
  fixed.update(false);
  EXPECT_EQ(fixed.scale(), 128);
  Fp16Config off;
  LossScaler none(off);
  EXPECT_EQ(none.scale(), 1);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// Without a scheduler in the config, HF Trainer's schedule applies: the k-th optimizer step
// (k = 1, 2, ...) runs at lr * lambda(k - 1), lambda from transformers.get_scheduler.
TEST(Schedulers, TrainerSchedulesFollowHf) {
  SchedulerConfig c;
  c.warmup_num_steps = 4;
  c.total_num_steps = 20;
  for (auto type : {SchedulerConfig::TrainerType::kLinear, SchedulerConfig::TrainerType::kCosine,
                    SchedulerConfig::TrainerType::kConstant, SchedulerConfig::TrainerType::kConstantWithWarmup}) {
    c.trainer_type = type;
    LrScheduler s(c, 0.5);
    for (int k = 1; k <= 22; ++k) {
      double step = k - 1, lambda;
      if (type == SchedulerConfig::TrainerType::kConstant) lambda = 1;
      else if (step < 4) lambda = step / 4;
      else if (type == SchedulerConfig::TrainerType::kLinear) lambda = std::max(0.0, (20 - step) / 16);
      else if (type == SchedulerConfig::TrainerType::kCosine) lambda = std::max(0.0, 0.5 * (1 + std::cos(M_PI * (step - 4) / 16)));
      else lambda = 1;
      EXPECT_NEAR(s.current().lr, 0.5 * lambda, 1e-15) << "type " << int(type) << " step " << k;
      s.step();
    }
  }
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// ---- edge values, as DeepSpeed 0.19's lr_schedules.py computes them ----
// Its warmup schedules use W = max(2, warmup_num_steps); gamma(it) = log(it + 1) / log(W) or it / W
// for it < W. Values written out here are worked by hand from those formulas.

TEST(SchedulerEdges, WarmupOfOneStepIsTwoSteps) {
  for (int64_t n : {0, 1, 2}) {  // 0 only comes from "auto" with --warmup_steps 0
    for (bool log : {true, false}) {
      SchedulerConfig c = warmup(SchedulerConfig::Type::kWarmupLR, log);
      c.warmup_num_steps = n;
      LrScheduler s(c, 0);
      EXPECT_DOUBLE_EQ(s.values_at(-1).lr, 1e-4) << n;
      EXPECT_DOUBLE_EQ(s.values_at(0).lr, 1e-4) << n;  // gamma(0) = 0 either way
      // W = 2: log(2) / log(2) = 1, or 1 / 2.
      EXPECT_DOUBLE_EQ(s.values_at(1).lr, log ? 1e-2 : 1e-4 + (1e-2 - 1e-4) * 0.5) << n;
      EXPECT_DOUBLE_EQ(s.values_at(2).lr, 1e-2) << n;
    }
  }
}

TEST(SchedulerEdges, WarmupDecayWithTotalNotAfterWarmup) {
  // gamma after warmup = max(0, (total - it) / max(1, total - W)): with total <= W it is 0 from
  // the first step after warmup, so the lr drops straight to warmup_min_lr.
  for (int64_t total : {3, 10}) {
    SchedulerConfig c = warmup(SchedulerConfig::Type::kWarmupDecayLR, false);
    c.total_num_steps = total;
    LrScheduler s(c, 0);
    EXPECT_NEAR(s.values_at(9).lr, 1e-4 + (1e-2 - 1e-4) * 0.9, 1e-16) << total;  // still warming up
    EXPECT_DOUBLE_EQ(s.values_at(10).lr, 1e-4) << total;
    EXPECT_DOUBLE_EQ(s.values_at(50).lr, 1e-4) << total;
  }
  SchedulerConfig c = warmup(SchedulerConfig::Type::kWarmupDecayLR, false);
  c.total_num_steps = 11;  // one decay step: (11 - 10) / max(1, 1) = 1, then 0
  LrScheduler s(c, 0);
  EXPECT_DOUBLE_EQ(s.values_at(10).lr, 1e-2);
  EXPECT_DOUBLE_EQ(s.values_at(11).lr, 1e-4);
}

TEST(SchedulerEdges, WarmupCosineWithTotalNotAfterWarmup) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kWarmupCosineLR;
  c.warmup_num_steps = 1;  // W = 2
  c.total_num_steps = 2;   // no decay window: max(1, 2 - 2) = 1 and the progress is clamped to 1
  c.warmup_min_ratio = 0.2;
  c.cos_min_ratio = 0.05;
  c.warmup_type_log = false;
  LrScheduler s(c, 4.0);
  EXPECT_DOUBLE_EQ(s.values_at(-1).lr, 0.0);
  EXPECT_DOUBLE_EQ(s.values_at(0).lr, 4.0 * 0.2);                    // 0.2 + (0 / 2) * 0.8
  EXPECT_DOUBLE_EQ(s.values_at(1).lr, 4.0 * (0.2 + 0.5 * 0.8));      // 0.2 + (1 / 2) * 0.8
  for (int it = 2; it < 6; ++it) EXPECT_DOUBLE_EQ(s.values_at(it).lr, 4.0 * 0.05) << it;
}

// DeepSpeed's OneCycle keeps the stair counts and never uses them (its _get_scale_factor is the
// triangle alone): a config with stairs gets the plain triangle, with a notice for each key.
TEST(SchedulerEdges, OneCycleStairCountsChangeNothing) {
  const DsConfig ds = parse_ds_config(boost::json::parse(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
        "cycle_first_step_size": 4, "cycle_second_step_size": 6, "cycle_first_stair_count": 2,
        "cycle_second_stair_count": 3}}})"), "ds.json", AutoValues{});
  std::string notices;
  for (const std::string& n : ds.notices) notices += n + "\n";
  EXPECT_NE(notices.find("cycle_first_stair_count"), std::string::npos) << notices;
  EXPECT_NE(notices.find("cycle_second_stair_count"), std::string::npos) << notices;
  LrScheduler s(ds.scheduler, 0);
  // Batch b = it + 1 in the cycle of 10: b / 4 rising, (10 - b) / 6 falling; b = 10 wraps to 0.
  const double scale[10] = {0.25, 0.5, 0.75, 1, 5.0 / 6, 4.0 / 6, 3.0 / 6, 2.0 / 6, 1.0 / 6, 0};
  for (int it = 0; it < 10; ++it) {
    ScheduledValues v = s.values_at(it);
    EXPECT_NEAR(v.lr, 1e-4 + 9e-4 * scale[it], 1e-15) << it;
    EXPECT_NEAR(*v.beta1, 0.9 - 0.1 * scale[it], 1e-15) << it;
  }
}

TEST(SchedulerEdges, OneCycleWithoutSecondHalf) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kOneCycle;
  c.cycle_min_lr = 0.0;
  c.cycle_max_lr = 1.0;
  c.cycle_first_step_size = 4;
  c.cycle_second_step_size = 0;  // DeepSpeed allows it: the cycle only rises, b / 4
  c.cycle_momentum = false;
  LrScheduler s(c, 0);
  for (int it = 0; it < 3; ++it) EXPECT_DOUBLE_EQ(s.values_at(it).lr, (it + 1) / 4.0) << it;
  EXPECT_DOUBLE_EQ(s.values_at(4).lr, 0.0);  // after the cycle: cycle_min_lr (no decay set)
  EXPECT_FALSE(s.values_at(0).beta1.has_value());
}

TEST(SchedulerEdges, LRRangeTestStepSizeOne) {
  SchedulerConfig c;
  c.type = SchedulerConfig::Type::kLRRangeTest;
  c.lr_range_test_min_lr = 0.5;
  c.lr_range_test_step_size = 1;
  c.lr_range_test_step_rate = 0.25;
  LrScheduler s(c, 0);
  EXPECT_DOUBLE_EQ(s.values_at(-1).lr, 0.5);
  EXPECT_DOUBLE_EQ(s.values_at(0).lr, 0.5 * 1.25);  // interval (0 + 1) / 1
  EXPECT_DOUBLE_EQ(s.values_at(3).lr, 0.5 * 2.0);   // interval 4
}

}  // namespace
}  // namespace zt
