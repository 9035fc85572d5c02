// Every layer's backward against central finite differences in double precision.
#include <cstring>

#include "backend/backend.h"
#include "grad_check.h"

namespace zt {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

class KernelGradients : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
  KernelOps<double>& ops = *backend->ops_f64();
};

TEST_F(KernelGradients, LayerNorm) {
  const int rows = 6, C = 10;
  auto x = random_vector(rows * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
  auto R = random_vector(rows * C, 4);
  std::vector<double> out(rows * C), mean(rows), rstd(rows);
  auto loss = [&] {
    ops.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C, 1e-5);
    return weighted_sum(out, R);
  };
  loss();
  std::vector<double> dx(rows * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ops.layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                         rows, C);
  expect_gradient_matches(x, dx, loss, "layernorm dx");
  expect_gradient_matches(w, dw, loss, "layernorm dweight");
  expect_gradient_matches(b, db, loss, "layernorm dbias");
}

TEST_F(KernelGradients, LayerNormBackwardAccumulates) {
  const int rows = 3, C = 4;
  auto x = random_vector(rows * C, 5), w = random_vector(C, 6), b = random_vector(C, 7), R = random_vector(rows * C, 8);
  std::vector<double> out(rows * C), mean(rows), rstd(rows);
  ops.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C, 1e-5);
  std::vector<double> dx1(rows * C, 0.0), dw1(C, 0.0), db1(C, 0.0);
  ops.layernorm_backward(dx1.data(), dw1.data(), db1.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), rows, C);
  std::vector<double> dx2(rows * C, 1.0), dw2(C, 1.0), db2(C, 1.0);
  ops.layernorm_backward(dx2.data(), dw2.data(), db2.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), rows, C);
  for (int i = 0; i < rows * C; ++i) EXPECT_NEAR(dx2[i], dx1[i] + 1.0, 1e-12);
  for (int i = 0; i < C; ++i) EXPECT_NEAR(dw2[i], dw1[i] + 1.0, 1e-12);
  for (int i = 0; i < C; ++i) EXPECT_NEAR(db2[i], db1[i] + 1.0, 1e-12);
}

TEST_F(KernelGradients, Matmul) {
  const int rows = 5, in = 7, outd = 6;
  auto x = random_vector(rows * in, 11), w = random_vector(in * outd, 12), b = random_vector(outd, 13);
  auto R = random_vector(rows * outd, 14);
  std::vector<double> out(rows * outd);
  auto loss = [&] {
    ops.matmul_forward(out.data(), x.data(), w.data(), b.data(), rows, in, outd);
    return weighted_sum(out, R);
  };
  loss();
  std::vector<double> dx(rows * in, 0.0), dw(in * outd, 0.0), db(outd, 0.0);
  ops.matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), rows, in, outd);
  expect_gradient_matches(x, dx, loss, "matmul dx");
  expect_gradient_matches(w, dw, loss, "matmul dweight");
  expect_gradient_matches(b, db, loss, "matmul dbias");
}

TEST_F(KernelGradients, MatmulTransposedTiedHead) {
  const int rows = 4, K = 6, N = 9;
  auto x = random_vector(rows * K, 21), w = random_vector(N * K, 22), R = random_vector(rows * N, 23);
  std::vector<double> out(rows * N);
  auto loss = [&] {
    ops.matmul_nt_forward(out.data(), x.data(), w.data(), rows, K, N);
    return weighted_sum(out, R);
  };
  loss();
  std::vector<double> dx(rows * K, 0.0), dw(N * K, 0.0);
  ops.matmul_nt_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rows, K, N);
  expect_gradient_matches(x, dx, loss, "lm_head dx");
  expect_gradient_matches(w, dw, loss, "lm_head dweight");
}

TEST_F(KernelGradients, CausalAttention) {
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = random_vector(B * T * 3 * C, 31), R = random_vector(B * T * C, 32);
  std::vector<double> out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    ops.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(out, R);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  ops.attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  expect_gradient_matches(qkv, dqkv, loss, "attention dqkv", 1e-6, qkv.size());
}

TEST_F(KernelGradients, AttentionIsCausal) {
  const int B = 1, T = 4, C = 4, NH = 1;
  auto qkv = random_vector(B * T * 3 * C, 33);
  std::vector<double> out1(B * T * C), out2(B * T * C), att(T * T);
  ops.attention_forward(out1.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0;  // change only the last position
  ops.attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_DOUBLE_EQ(out1[i], out2[i]) << "position " << i / C << " saw the future";
}

TEST_F(KernelGradients, Gelu) {
  const size_t n = 50;
  auto x = random_vector(n, 41, 2.0), R = random_vector(n, 42);
  std::vector<double> out(n);
  auto loss = [&] {
    ops.gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out, R);
  };
  loss();
  // The tanh form itself, computed independently.
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    double expected = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[i], expected, 1e-12);
  }
  std::vector<double> dx(n);
  ops.gelu_backward(dx.data(), x.data(), R.data(), n);
  expect_gradient_matches(x, dx, loss, "gelu dx");
}

TEST_F(KernelGradients, SoftmaxCrossEntropy) {
  const int rows = 4, V = 7;
  auto logits = random_vector(rows * V, 51, 3.0);
  std::vector<int32_t> targets = {3, 0, -1, 6};  // -1: ignored position
  std::vector<double> work(rows * V), losses(rows);
  const double dloss = 0.7;
  auto loss = [&] {
    work = logits;
    double sum = 0;  // the kernel adds weight x (sum of the losses) into it
    ops.softmax_xent_forward(work.data(), losses.data(), targets.data(), rows, V, &sum, dloss);
    return sum;
  };
  loss();
  for (int r = 0; r < rows; ++r) {  // the loss itself, independently
    if (targets[r] < 0) {
      EXPECT_EQ(losses[r], 0.0);
      continue;
    }
    double m = -1e300, s = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, logits[r * V + v]);
    for (int v = 0; v < V; ++v) s += std::exp(logits[r * V + v] - m);
    EXPECT_NEAR(losses[r], std::log(s) + m - logits[r * V + targets[r]], 1e-12);
  }
  ops.softmax_xent_backward(work.data(), targets.data(), rows, V, dloss);
  const std::vector<double> dlogits = work;  // loss() below reuses `work`
  expect_gradient_matches(logits, dlogits, loss, "softmax-xent dlogits");
}

TEST_F(KernelGradients, Embedding) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tokens = {1, 4, 1, 0, 1, 3};  // repeated tokens accumulate
  auto wte = random_vector(V * C, 61), wpe = random_vector(T * C, 62), R = random_vector(B * T * C, 63);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    ops.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(out, R);
  };
  loss();
  std::vector<double> dwte(V * C, 0.0), dwpe(T * C, 0.0);
  ops.embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C);
  expect_gradient_matches(wte, dwte, loss, "embedding dwte");
  expect_gradient_matches(wpe, dwpe, loss, "embedding dwpe");
}

TEST_F(KernelGradients, ResidualAndAccumulate) {
  const size_t n = 9;
  auto a = random_vector(n, 71), b = random_vector(n, 72);
  std::vector<double> out(n);
  ops.residual_forward(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(out[i], a[i] + b[i]);
  ops.accumulate(out.data(), a.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(out[i], 2 * a[i] + b[i]);
}

}  // namespace
}  // namespace zt
