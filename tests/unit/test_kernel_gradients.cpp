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

TEST_F(KernelGradients, LinearWithBiasAndAccumulatingDx) {
  const int rows = 4, in = 6, outd = 9;
  auto x = random_vector(rows * in, 21), w = random_vector(outd * in, 22), b = random_vector(outd, 24);
  auto R = random_vector(rows * outd, 23);
  std::vector<double> out(rows * outd);
  auto loss = [&] {
    ops.linear_forward(out.data(), x.data(), w.data(), b.data(), rows, in, outd);
    return weighted_sum(out, R);
  };
  loss();
  for (int r = 0; r < rows; ++r) {  // nn.Linear: out = x W^T + b, computed here on its own
    for (int o = 0; o < outd; ++o) {
      double e = b[o];
      for (int i = 0; i < in; ++i) e += x[r * in + i] * w[o * in + i];
      EXPECT_NEAR(out[r * outd + o], e, 1e-12);
    }
  }
  std::vector<double> dx(rows * in, 0.0), dw(outd * in, 0.0), db(outd, 0.0);
  ops.linear_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), rows, in, outd, false);
  expect_gradient_matches(x, dx, loss, "linear dx");
  expect_gradient_matches(w, dw, loss, "linear dweight");
  expect_gradient_matches(b, db, loss, "linear dbias");
  // accumulate_dx adds to what is there; without it dx is overwritten.
  std::vector<double> acc(rows * in, 1.0), over(rows * in, 5.0), dw2(outd * in, 0.0);
  ops.linear_backward(acc.data(), dw2.data(), nullptr, R.data(), x.data(), w.data(), rows, in, outd, true);
  ops.linear_backward(over.data(), dw2.data(), nullptr, R.data(), x.data(), w.data(), rows, in, outd, false);
  for (int i = 0; i < rows * in; ++i) {
    EXPECT_NEAR(acc[i], dx[i] + 1.0, 1e-12);
    EXPECT_NEAR(over[i], dx[i], 1e-12);
  }
}

TEST_F(KernelGradients, RmsNorm) {
  const int rows = 5, C = 12;
  auto x = random_vector(rows * C, 81), w = random_vector(C, 82), R = random_vector(rows * C, 83);
  std::vector<double> out(rows * C), rstd(rows);
  const double eps = 1e-6;
  auto loss = [&] {
    ops.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, eps);
    return weighted_sum(out, R);
  };
  loss();
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[r * C + c] * x[r * C + c] / C;
    for (int c = 0; c < C; ++c) EXPECT_NEAR(out[r * C + c], w[c] * x[r * C + c] / std::sqrt(ms + eps), 1e-12);
  }
  std::vector<double> dx(rows * C, 0.5), dw(C, 0.25);  // both accumulate
  ops.rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), rows, C);
  for (auto& v : dx) v -= 0.5;
  for (auto& v : dw) v -= 0.25;
  expect_gradient_matches(x, dx, loss, "rmsnorm dx");
  expect_gradient_matches(w, dw, loss, "rmsnorm dweight");
}

// HF's apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, cos and sin repeated over both halves.
TEST_F(KernelGradients, RotaryIsHfRotateHalfAndInverts) {
  const int B = 2, T = 3, H = 2, hs = 6, half = hs / 2;
  auto x = random_vector(B * T * H * hs, 91), R = random_vector(B * T * H * hs, 92);
  auto angles = random_vector(T * half, 93, 2.0);
  std::vector<double> cs(T * half), sn(T * half);
  for (int i = 0; i < T * half; ++i) cs[i] = std::cos(angles[i]), sn[i] = std::sin(angles[i]);
  std::vector<double> y = x;
  ops.rotary(y.data(), cs.data(), sn.data(), B, T, H, hs, false);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const double* v = &x[((b * T + t) * H + h) * hs];
        for (int i = 0; i < hs; ++i) {
          const double rot = i < half ? -v[i + half] : v[i - half];
          const double expected = v[i] * cs[t * half + i % half] + rot * sn[t * half + i % half];
          EXPECT_NEAR(y[((b * T + t) * H + h) * hs + i], expected, 1e-12);
        }
      }
    }
  }
  std::vector<double> back = y;
  ops.rotary(back.data(), cs.data(), sn.data(), B, T, H, hs, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-12);
  // The inverse rotation applied to dy is the gradient.
  auto loss = [&] {
    std::vector<double> z = x;
    ops.rotary(z.data(), cs.data(), sn.data(), B, T, H, hs, false);
    return weighted_sum(z, R);
  };
  std::vector<double> dx = R;
  ops.rotary(dx.data(), cs.data(), sn.data(), B, T, H, hs, true);
  expect_gradient_matches(x, dx, loss, "rotary dx");
}

TEST_F(KernelGradients, GroupedQueryAttention) {
  const int B = 2, T = 5, NH = 4, NKV = 2, hs = 3;
  auto q = random_vector(B * T * NH * hs, 101), k = random_vector(B * T * NKV * hs, 102);
  auto v = random_vector(B * T * NKV * hs, 103), R = random_vector(B * T * NH * hs, 104);
  std::vector<double> out(B * T * NH * hs), att(B * NH * T * T);
  auto loss = [&] {
    ops.gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, T, NH, NKV, hs);
    return weighted_sum(out, R);
  };
  loss();
  // Query head h attends with kv head h / 2: the same as multi-head attention on repeated k, v.
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double m = -1e300, s = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < hs; ++i) d += q[((b * T + t) * NH + h) * hs + i] * k[((b * T + u) * NKV + h / 2) * hs + i];
          p[u] = d / std::sqrt(double(hs));
          m = std::max(m, p[u]);
        }
        for (auto& e : p) s += (e = std::exp(e - m));
        for (int i = 0; i < hs; ++i) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += p[u] / s * v[((b * T + u) * NKV + h / 2) * hs + i];
          EXPECT_NEAR(out[((b * T + t) * NH + h) * hs + i], o, 1e-12);
        }
      }
    }
  }
  std::vector<double> dq(q.size(), 7.0), dk(k.size(), 7.0), dv(v.size(), 7.0);  // overwritten
  ops.gqa_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), out.data(), q.data(), k.data(), v.data(),
                             att.data(), B, T, NH, NKV, hs);
  expect_gradient_matches(q, dq, loss, "gqa dq", 1e-6, q.size());
  expect_gradient_matches(k, dk, loss, "gqa dk", 1e-6, k.size());
  expect_gradient_matches(v, dv, loss, "gqa dv", 1e-6, v.size());
}

TEST_F(KernelGradients, AttentionWithKvCacheEqualsTheFullSequence) {
  // The last Tq queries against Tk cached keys give the last Tq rows of the full attention.
  const int T = 6, Tq = 2, NH = 2, NKV = 1, hs = 4;
  auto q = random_vector(T * NH * hs, 111), k = random_vector(T * NKV * hs, 112), v = random_vector(T * NKV * hs, 113);
  std::vector<double> full(T * NH * hs), att(NH * T * T), part(Tq * NH * hs), att2(NH * Tq * T);
  ops.gqa_attention_forward(full.data(), att.data(), q.data(), k.data(), v.data(), 1, T, T, NH, NKV, hs);
  ops.gqa_attention_forward(part.data(), att2.data(), q.data() + (T - Tq) * NH * hs, k.data(), v.data(), 1, Tq, T,
                            NH, NKV, hs);
  for (int i = 0; i < Tq * NH * hs; ++i) EXPECT_NEAR(part[i], full[(T - Tq) * NH * hs + i], 1e-12);
}

TEST_F(KernelGradients, SwiGlu) {
  const size_t n = 40;
  auto g = random_vector(n, 121, 3.0), u = random_vector(n, 122), R = random_vector(n, 123);
  std::vector<double> out(n);
  auto loss = [&] {
    ops.swiglu_forward(out.data(), g.data(), u.data(), n);
    return weighted_sum(out, R);
  };
  loss();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-12);
  std::vector<double> dg(n), du(n);
  ops.swiglu_backward(dg.data(), du.data(), R.data(), g.data(), u.data(), n);
  expect_gradient_matches(g, dg, loss, "swiglu dgate");
  expect_gradient_matches(u, du, loss, "swiglu dup");
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
  ops.attention_backward(dqkv.data(), R.data(), out.data(), qkv.data(), att.data(), B, T, C, NH);
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

TEST_F(KernelGradients, EmbeddingWithoutPositions) {
  const int B = 1, T = 4, C = 3, V = 4;
  std::vector<int32_t> tokens = {2, 2, 0, 3};
  auto wte = random_vector(V * C, 64), R = random_vector(B * T * C, 65);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    ops.embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
    return weighted_sum(out, R);
  };
  loss();
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[t * C + c], wte[tokens[t] * C + c]);
  }
  std::vector<double> dwte(V * C, 0.0);
  ops.embedding_backward(dwte.data(), nullptr, R.data(), tokens.data(), B, T, C);
  expect_gradient_matches(wte, dwte, loss, "embedding dwte without wpe");
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
