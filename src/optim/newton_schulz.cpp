#include "optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace zt {

namespace {

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr float kNormEps = 1e-7f;
// Gram Newton-Schulz restarts from X at this iteration (DeepSpeed's restart_at), which keeps its
// error from growing in low precision.
constexpr int kGramRestart = 2;

}  // namespace

size_t NewtonSchulz::workspace_elements(size_t max_elements, size_t max_side) {
  return max_elements + 5 * max_side * max_side;  // one matrix-sized temporary and five m x m
}

double NewtonSchulz::cost(OptimizerConfig::NsMethod method, int steps, size_t rows, size_t cols) {
  const double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  if (method == OptimizerConfig::NsMethod::kStandard || m == n) return steps * (2 * m * m * n + m * m * m);
  // R once, a restart (Q X and R), the final Q X; per iteration up to four m x m products.
  return 4 * m * m * n + 4.0 * steps * m * m * m;
}

NewtonSchulz::NewtonSchulz(Backend& backend, OptimizerConfig::NsMethod method, int steps, size_t max_elements,
                           size_t max_side)
    : backend_(backend), stream_(backend.compute_stream()), gemm_(backend.ops()), ops_(backend.optimizer_ops()),
      method_(method), steps_(steps), max_elements_(max_elements), max_side_(max_side) {
  if (max_elements > 0) work_ = DeviceArray<float>(backend, workspace_elements(max_elements, max_side));
  norm_ = DeviceArray<double>(backend, 1);
}

void NewtonSchulz::gram_matrix(float* out, const float* x, size_t rows, size_t cols) {
  if (rows <= cols) {  // X X^T: nn.Linear's forward of X by itself
    gemm_.linear_forward(out, x, x, nullptr, int(rows), int(cols), int(rows));
  } else {  // G^T G: the weight gradient of a Conv1D layer whose input and output are both G
    ops_.zero(out, DType::kF32, cols * cols);
    gemm_.matmul_backward(nullptr, out, nullptr, x, x, nullptr, int(rows), int(cols), int(cols));
  }
}

void NewtonSchulz::apply_left(float* out, const float* s, const float* x, size_t rows, size_t cols) {
  if (rows <= cols) {  // S X
    gemm_.matmul_forward(out, s, x, nullptr, int(rows), int(rows), int(cols));
  } else {  // (S X^T)^T = X S
    gemm_.matmul_forward(out, x, s, nullptr, int(rows), int(cols), int(cols));
  }
}

void NewtonSchulz::square_product(float* out, const float* p, const float* q, size_t m) {
  gemm_.linear_forward(out, p, q, nullptr, int(m), int(m), int(m));  // p q^T = p q
}

void NewtonSchulz::orthogonalize(float* x, size_t rows, size_t cols) {
  const size_t n = rows * cols;
  ZT_CHECK(n <= max_elements_ && std::min(rows, cols) <= max_side_, "a ", rows, " x ", cols,
           " matrix is larger than the Newton-Schulz workspace");
  if (n == 0) return;
  backend_.zero_async(norm_.data(), sizeof(double), stream_);
  ops_.sum_squares(x, DType::kF32, n, norm_.data());
  ops_.scale_by_inverse_norm(x, n, norm_.data(), kNormEps);
  if (method_ == OptimizerConfig::NsMethod::kGram && rows != cols) {
    gram(x, rows, cols);
  } else {
    standard(x, rows, cols);
  }
  const float scale = float(std::sqrt(std::max(1.0, double(rows) / double(cols))));
  if (scale != 1.0f) ops_.axpby(x, scale, x, 0.0f, n);
}

void NewtonSchulz::standard(float* x, size_t rows, size_t cols) {
  const size_t m = std::min(rows, cols), n = rows * cols;
  float* a = work_.data() + n;
  float* aa = a + m * m;
  float* cur = x;
  float* next = work_.data();
  for (int i = 0; i < steps_; ++i) {
    gram_matrix(a, cur, rows, cols);            // A = X X^T
    square_product(aa, a, a, m);                // A A
    ops_.axpby(aa, kC, a, kB, m * m);           // B = b A + c A A
    apply_left(next, aa, cur, rows, cols);      // B X
    ops_.axpby(next, 1.0f, cur, kA, n);         // a X + B X
    std::swap(cur, next);
  }
  if (cur != x) backend_.copy_async(x, cur, n * sizeof(float), stream_);
}

void NewtonSchulz::gram(float* x, size_t rows, size_t cols) {
  const size_t m = std::min(rows, cols), n = rows * cols, mm = m * m;
  float* tmp = work_.data();  // matrix-sized
  float* r = tmp + n;
  float* z = r + mm;
  float* q = z + mm;
  float* t1 = q + mm;
  float* t2 = t1 + mm;
  float* cur = x;  // X, while it is still carried
  bool have_q = false;
  gram_matrix(r, cur, rows, cols);  // R = X X^T
  for (int i = 0; i < steps_; ++i) {
    if (i == kGramRestart) {
      apply_left(tmp, q, cur, rows, cols);  // X = Q X
      std::swap(cur, tmp);
      gram_matrix(r, cur, rows, cols);
      have_q = false;
    }
    square_product(z, r, r, m);  // Z = b R + c R R
    ops_.axpby(z, kC, r, kB, mm);
    if (!have_q) {  // Q = Z + a I
      backend_.copy_async(q, z, mm * sizeof(float), stream_);
      ops_.add_diagonal(q, m, kA);
      have_q = true;
    } else {  // Q = a Q + Z Q
      square_product(t1, z, q, m);
      ops_.axpby(t1, 1.0f, q, kA, mm);
      std::swap(q, t1);
    }
    if (i < steps_ - 1 && i + 1 != kGramRestart) {
      square_product(t1, z, r, m);  // RZ = a R + Z R
      ops_.axpby(t1, 1.0f, r, kA, mm);
      square_product(t2, z, t1, m);  // R = a RZ + Z RZ
      ops_.axpby(t2, 1.0f, t1, kA, mm);
      std::swap(r, t2);
    }
  }
  float* out = cur == x ? tmp : x;  // X = Q X, into x unless x is the X read
  apply_left(out, q, cur, rows, cols);
  if (out != x) backend_.copy_async(x, out, n * sizeof(float), stream_);
}

}  // namespace zt
