// The CPU kernels' bf16 matmul mode (KernelOps::set_matmul_dtype, DeepSpeed's bf16: GEMM inputs
// rounded to bf16, products summed in fp32): every GEMM of the matmul and linear ops against a
// double-precision reference computed here on the bf16-rounded inputs. Products of two bf16
// values are exact in fp32, so the only error left is fp32 summation order: 1e-5 of the largest
// output is ~100 ulp of headroom, while a wrong transpose, operand or rounding is off by 1e-3 or
// more. On a CPU without bf16 instructions (or under ZT_CPU_ISA=avx2) the mode must stay fp32 and
// give fp32's results exactly; the accuracy tests are then skipped with the reason (ctest reports
// the test skipped: SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt). ctest runs this with
// ZT_BF16_GEMM=bf16, so that oneDNN's bf16 GEMMs are tested wherever the CPU has the instructions
// (a run takes them only where they are faster than fp32's: bf16_gemm.h), and once more with
// ZT_BF16_GEMM=fp32 (the mode test alone).
//
// Also here: Bf16Gemm's entries on bf16 operands as they lie (the CPU's bf16 kernels in a
// training run) and the attention built on them (bf16_attention.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/bf16_attention.h"
#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/cpu_kernels.h"
#include "comm/data_comm.h"
#include "comm/self_comm.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/memory_pool.h"
#include "model/model_layout.h"
#include "random_test_util.h"
#include "tiny_models.h"
#include "zero/engine.h"
#include "zero/engine_model.h"
#include "zero/memory_estimate.h"

namespace zt {
namespace {

double r(float x) { return double(to_float(to_bf16(x))); }  // the value a bf16 GEMM sees

// C[M,N] = op(A) op(B) + C0 in double on rounded inputs; A is [M,K] or (ta) [K,M], B is [K,N] or (tb) [N,K].
std::vector<double> reference(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A,
                              const std::vector<float>& B, const std::vector<float>& C0) {
  std::vector<double> C(size_t(M) * N);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = C0.empty() ? 0.0 : C0[size_t(i) * N + j];
      for (int k = 0; k < K; ++k) {
        const double a = r(ta ? A[size_t(k) * M + i] : A[size_t(i) * K + k]);
        const double b = r(tb ? B[size_t(j) * K + k] : B[size_t(k) * N + j]);
        s += a * b;
      }
      C[size_t(i) * N + j] = s;
    }
  }
  return C;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(want[i]));
  }
  EXPECT_LT(err, 1e-5 * ref) << what << ": max error " << err << " of max |value| " << ref;
}

class Bf16Matmul : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ops.set_matmul_dtype(DType::kBF16) != DType::kBF16) {
      GTEST_SKIP() << "this CPU has no bf16 GEMM (needs AVX512-BF16 or AMX; ZT_CPU_ISA=avx2 turns it off): "
                      "bf16 runs keep fp32 matmuls here";
    }
  }
  std::unique_ptr<Backend> backend = make_cpu_backend();
  KernelOps<float>& ops = backend->ops();
  // Shapes that are multiples of nothing.
  const int rows = 37, in = 70, out = 53;
};

TEST_F(Bf16Matmul, LinearForwardAndBackward) {
  auto x = randn(size_t(rows) * in, 1), w = randn(size_t(out) * in, 2), b = randn(size_t(out), 3);
  auto dout = randn(size_t(rows) * out, 4), dx0 = randn(size_t(rows) * in, 5), dw0 = randn(size_t(out) * in, 6);
  std::vector<float> y(size_t(rows) * out);
  ops.linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
  std::vector<float> bias_rows(size_t(rows) * out);
  for (int i = 0; i < rows; ++i) std::copy(b.begin(), b.end(), bias_rows.begin() + long(i) * out);
  expect_close(y, reference(false, true, rows, out, in, x, w, bias_rows), "linear forward: x W^T + b");

  std::vector<float> dx = dx0, dw = dw0;
  ops.linear_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), rows, in, out, true);
  expect_close(dx, reference(false, false, rows, in, out, dout, w, dx0), "linear dx += dout W");
  expect_close(dw, reference(true, false, out, in, rows, dout, x, dw0), "linear dW += dout^T x");
  ops.linear_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), rows, in, out, false);
  expect_close(dx, reference(false, false, rows, in, out, dout, w, {}), "linear dx = dout W");
}

TEST_F(Bf16Matmul, Conv1DMatmulForwardAndBackward) {
  auto x = randn(size_t(rows) * in, 11), w = randn(size_t(in) * out, 12), dout = randn(size_t(rows) * out, 13);
  auto dw0 = randn(size_t(in) * out, 14);
  std::vector<float> y(size_t(rows) * out);
  ops.matmul_forward(y.data(), x.data(), w.data(), nullptr, rows, in, out);
  expect_close(y, reference(false, false, rows, out, in, x, w, {}), "matmul forward: x W");
  std::vector<float> dx(size_t(rows) * in), dw = dw0;
  ops.matmul_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), rows, in, out);
  expect_close(dx, reference(false, true, rows, in, out, dout, w, {}), "matmul dx = dout W^T");
  expect_close(dw, reference(true, false, in, out, rows, x, dout, dw0), "matmul dW += x^T dout");
}

TEST_F(Bf16Matmul, Fp32AgainIsExactlyFp32) {
  auto x = randn(size_t(rows) * in, 21), w = randn(size_t(out) * in, 22);
  std::vector<float> bf(size_t(rows) * out), f32(size_t(rows) * out), fresh(size_t(rows) * out);
  ops.linear_forward(bf.data(), x.data(), w.data(), nullptr, rows, in, out);
  EXPECT_EQ(ops.set_matmul_dtype(DType::kF32), DType::kF32);
  ops.linear_forward(f32.data(), x.data(), w.data(), nullptr, rows, in, out);
  auto other = make_cpu_backend();
  other->ops().linear_forward(fresh.data(), x.data(), w.data(), nullptr, rows, in, out);
  EXPECT_EQ(f32, fresh);
  EXPECT_NE(bf, f32);  // the bf16 mode did round its inputs
}

// Runs on every CPU: the mode is used exactly where the CPU has bf16 instructions and the AVX-512
// kernels are on, and where it is not, a bf16 run's matmuls are fp32's, bit for bit.
TEST(Bf16MatmulMode, UsedExactlyWhereTheCpuHasBf16AndOtherwiseFp32) {
  const char* choice = std::getenv("ZT_BF16_GEMM");
  ASSERT_TRUE(choice && (std::strcmp(choice, "bf16") == 0 || std::strcmp(choice, "fp32") == 0))
      << "ctest sets ZT_BF16_GEMM to bf16 or fp32 for this test";
  auto backend = make_cpu_backend();
  const bool fast = active_cpu_isa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16") &&
                    std::strcmp(choice, "bf16") == 0;
  const DType used = backend->ops().set_matmul_dtype(DType::kBF16);
  EXPECT_EQ(used, fast ? DType::kBF16 : DType::kF32);
  if (used == DType::kF32) {
    const int rows = 9, in = 21, out = 13;
    auto x = randn(size_t(rows) * in, 31), w = randn(size_t(out) * in, 32);
    std::vector<float> got(size_t(rows) * out), want(size_t(rows) * out);
    backend->ops().linear_forward(got.data(), x.data(), w.data(), nullptr, rows, in, out);
    make_cpu_backend()->ops().linear_forward(want.data(), x.data(), w.data(), nullptr, rows, in, out);
    EXPECT_EQ(got, want);
  }
}

// Bf16Gemm on bf16 operands as they lie: every transpose, a leading dimension wider than the
// operand (a head's columns in a packed row), a bias row, accumulation (beta 1), bf16 and fp32 C.
// bf16 C is rounded once: within 2^-8 of each value; fp32 C within 1e-5 of the largest, as above.
TEST(Bf16Gemm, Bf16OperandsAsTheyLie) {
  const std::unique_ptr<cpu::Bf16Gemm> gemm = cpu::Bf16Gemm::make_if_supported();
  if (!gemm) GTEST_SKIP() << "this CPU has no bf16 GEMM instructions (AVX512-BF16 or AMX; or ZT_CPU_ISA=avx2)";
  const int M = 37, N = 53, K = 70, pad = 9;  // operands stored with pad more columns than they use
  auto round_all = [](std::vector<float> v) {
    for (float& x : v) x = to_float(to_bf16(x));
    return v;
  };
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
      const int lda = a_cols + pad, ldb = b_cols + pad;
      auto a = round_all(randn(size_t(a_rows) * lda, 41)), b = round_all(randn(size_t(b_rows) * ldb, 42));
      auto c0 = round_all(randn(size_t(M) * N, 43)), bias = round_all(randn(size_t(N), 44));
      std::vector<float> a_dense(size_t(a_rows) * a_cols), b_dense(size_t(b_rows) * b_cols);
      for (int i = 0; i < a_rows; ++i) {
        std::copy_n(a.begin() + long(i) * lda, a_cols, a_dense.begin() + long(i) * a_cols);
      }
      for (int i = 0; i < b_rows; ++i) {
        std::copy_n(b.begin() + long(i) * ldb, b_cols, b_dense.begin() + long(i) * b_cols);
      }
      std::vector<bf16> a16(a.size()), b16(b.size()), bias16(bias.size());
      convert(a.data(), a16.data(), a.size());
      convert(b.data(), b16.data(), b.size());
      convert(bias.data(), bias16.data(), bias.size());
      const std::string what = std::string(ta ? "A^T" : "A") + (tb ? " B^T" : " B");
      for (bool accumulate : {false, true}) {
        const std::vector<double> want =
            reference(ta, tb, M, N, K, a_dense, b_dense, accumulate ? c0 : std::vector<float>{});
        std::vector<float> c32 = c0;
        gemm->gemm(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, accumulate ? 1.0f : 0.0f, c32.data(), N);
        expect_close(c32, want, (what + (accumulate ? " + C, fp32 C" : ", fp32 C")).c_str());
        std::vector<bf16> c16(c0.size());
        convert(c0.data(), c16.data(), c0.size());
        const bool with_bias = !accumulate;
        gemm->gemm(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, accumulate ? 1.0f : 0.0f, c16.data(), N,
                   with_bias ? bias16.data() : nullptr);
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          const double w = want[i] + (with_bias ? bias[i % N] : 0.0);
          worst = std::max(worst, std::fabs(double(to_float(c16[i])) - w) / std::max(std::fabs(w), 1e-3));
        }
        EXPECT_LE(worst, 1.0 / 256) << what << (with_bias ? " + bias" : " + C") << ", bf16 C: rounded more than once";
      }
    }
  }
}

// Weight packs (KernelOps::weight_packs): a product whose B lies in a kept range reads B from a
// copy in oneDNN's blocked layout. It must give the plain product's bits (the same kernels, B
// already laid out), once per weight, shape and transposition (its forward and its dx); it must
// read the pack, not the weight, until kStale (so a weight written without kStale gives the old
// product: the contract's other side), and the weight's new values after; operands outside the
// range are never packed; kDrop gives every byte back to the device pool.
TEST(Bf16Gemm, WeightPacksGiveThePlainProductAndFollowKStale) {
  const std::unique_ptr<cpu::Bf16Gemm> gemm = cpu::Bf16Gemm::make_if_supported();
  if (!gemm) GTEST_SKIP() << "this CPU has no bf16 GEMM instructions (AVX512-BF16 or AMX; or ZT_CPU_ISA=avx2)";
  const int M = 29, N = 70, K = 48;  // N not a multiple of oneDNN's 64-column blocks: padded packs
  auto to16 = [](const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    convert(v.data(), out.data(), v.size());
    return out;
  };
  const std::vector<bf16> x = to16(randn(size_t(M) * K, 51)), dy = to16(randn(size_t(M) * N, 52));
  std::vector<bf16> w = to16(randn(size_t(K) * N, 53));  // [K, N]: x @ w forward, dy @ w^T its dx
  const std::vector<bf16> other = to16(randn(size_t(K) * N, 54));
  auto forward = [&](const std::vector<bf16>& b) {
    std::vector<bf16> c(size_t(M) * N);
    gemm->gemm(false, false, M, N, K, x.data(), K, b.data(), N, 0.0f, c.data(), N);
    return c;
  };
  auto dx = [&](const std::vector<bf16>& b) {
    std::vector<bf16> c(size_t(M) * K);
    gemm->gemm(false, true, M, K, N, dy.data(), N, b.data(), N, 0.0f, c.data(), K);
    return c;
  };
  auto bits = [](const std::vector<bf16>& v) {
    std::vector<uint16_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(bf16));
    return out;
  };
  const auto plain_forward = bits(forward(w)), plain_dx = bits(dx(w));
  EXPECT_EQ(gemm->weight_pack_bytes(), 0u) << "nothing is packed before a range is kept";
  const size_t pool_before = pool_in_use()[Pool::kDevice];
  const void *lo = w.data(), *hi = w.data() + w.size();
  gemm->weight_packs(lo, hi, WeightPacks::kKeep);
  EXPECT_EQ(bits(forward(w)), plain_forward) << "a packed weight's forward";
  EXPECT_EQ(bits(dx(w)), plain_dx) << "a packed weight's dx";
  const size_t both = gemm->pack_bytes(K, N) + gemm->pack_bytes(N, K);
  EXPECT_EQ(gemm->weight_pack_bytes(), both);
  EXPECT_GE(gemm->pack_bytes(K, N), size_t(K) * N * sizeof(bf16));
  EXPECT_EQ(pool_in_use()[Pool::kDevice] - pool_before, both) << "packs count in the device pool";
  EXPECT_EQ(bits(forward(w)), plain_forward) << "the second use";
  forward(other);  // a weight outside the kept range
  EXPECT_EQ(gemm->weight_pack_bytes(), both) << "an operand outside the kept range was packed";

  const std::vector<bf16> old = w;
  w = other;  // written without kStale: the products still read the packs of the old weight
  EXPECT_EQ(bits(forward(w)), plain_forward) << "the forward did not read its pack";
  gemm->weight_packs(lo, hi, WeightPacks::kStale);
  const auto other_forward = bits(forward(other)), other_dx = bits(dx(other));  // `other` lies outside
  EXPECT_NE(other_forward, plain_forward);
  EXPECT_EQ(bits(forward(w)), other_forward) << "after kStale the forward read a stale pack";
  EXPECT_EQ(bits(dx(w)), other_dx) << "after kStale the dx read a stale pack";
  EXPECT_EQ(gemm->weight_pack_bytes(), both) << "kStale reuses the packs' memory";

  gemm->weight_packs(lo, hi, WeightPacks::kDrop);
  EXPECT_EQ(gemm->weight_pack_bytes(), 0u);
  EXPECT_EQ(pool_in_use()[Pool::kDevice], pool_before);
  w = old;
  EXPECT_EQ(bits(forward(w)), plain_forward) << "a dropped range is read as it lies";
  EXPECT_EQ(gemm->weight_pack_bytes(), 0u) << "a dropped range was packed again";
}

// The engine's side of weight packs: a bf16 model at stages 0-2 (GPT-2 and Llama, two micro-steps
// a step, with and without activation checkpointing) trains bit for bit as without packs,
// through steps (share_parameters: kStale) and a load of other weights in the middle; the packs'
// bytes are zero_estimate's, and an engine gone leaves none. Stage 3 keeps none (its gathered
// units change under the same addresses).
TEST(Bf16WeightPacks, EngineTrainsBitForBitAsWithout) {
  if (!cpu_bf16_gemm_in_place()) {
    GTEST_SKIP() << "oneDNN's bf16 GEMMs are not this run's (needs AVX512-BF16 or AMX and ZT_BF16_GEMM=bf16)";
  }
  const char* outer = std::getenv("ZT_BF16_WEIGHT_PACKS");  // restored at the end
  const std::string outer_value = outer ? outer : "";
  auto backend = make_cpu_backend();
  SelfComm comm;
  auto data = make_data_comm(*backend, comm);
  const int B = 2, T = 16;
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 2654435761u) % 64u);
  struct Run {
    std::vector<double> losses;
    std::vector<float> master;
    size_t pack_bytes = 0;
  };
  auto train = [&](const ModelConfig& mc, int stage, bool checkpointing, bool packs) {
    ::setenv("ZT_BF16_WEIGHT_PACKS", packs ? "1" : "0", 1);
    const std::unique_ptr<ModelLayout> layout = make_model_layout(mc);
    DsConfig ds;
    ds.train_micro_batch_size_per_gpu = B;
    ds.gradient_accumulation_steps = 2;
    ds.train_batch_size = 2 * B;
    ds.optimizer.lr = 1e-2;
    ds.bf16 = true;
    ds.zero.stage = stage;
    Run run;
    ZeroEngine engine(*layout, *backend, *data, comm, ds, DType::kBF16);
    engine.init_params(7);
    const std::unique_ptr<BoundModel> model = make_engine_model(engine, *layout, *backend, B, T, checkpointing);
    for (int step = 0; step < 4; ++step) {
      if (step == 2) engine.load(init_source(*layout, 8));  // other weights under the same addresses
      for (int micro = 0; micro < 2; ++micro) {
        const int32_t* in = tokens.data() + micro;  // each micro-step its own tokens
        model->forward(in, in + 1, B, T, 1.0, engine.backward_scale());
        model->backward(engine.backward_scale());
        run.losses.push_back(model->take_loss());
      }
      run.pack_bytes = std::max(run.pack_bytes, cpu::shared_bf16_gemm()->weight_pack_bytes());
      engine.step();
    }
    run.master = engine.gather_master_weights();
    ::unsetenv("ZT_BF16_WEIGHT_PACKS");
    return run;
  };
  for (const ModelConfig& mc : {testing::tiny_gpt2(), testing::tiny_llama()}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (bool checkpointing : {false, true}) {
        const std::string where = cat(mc.model_type, " stage ", stage, checkpointing ? ", checkpointing" : "");
        const Run without = train(mc, stage, checkpointing, false), with = train(mc, stage, checkpointing, true);
        EXPECT_EQ(without.pack_bytes, 0u) << where;
        EXPECT_EQ(cpu::shared_bf16_gemm()->weight_pack_bytes(), 0u) << where << ": an engine gone left packs";
        EXPECT_EQ(with.losses, without.losses) << where;
        EXPECT_EQ(with.master, without.master) << where;
        ::setenv("ZT_BF16_WEIGHT_PACKS", "1", 1);
        DsConfig ds;
        ds.bf16 = true;
        ds.zero.stage = stage;
        RunShape shape;
        shape.seq_len = T;
        shape.activation_dtype = "bf16";
        EXPECT_EQ(with.pack_bytes, estimate_memory(mc, ds, shape).weight_packs) << where;
        shape.emulated = true;  // its queued kernels keep none
        EXPECT_EQ(estimate_memory(mc, ds, shape).weight_packs, 0u) << where;
        ::unsetenv("ZT_BF16_WEIGHT_PACKS");
        if (stage < 3) EXPECT_GT(with.pack_bytes, 0u) << where;
        else EXPECT_EQ(with.pack_bytes, 0u) << where;
      }
    }
  }
  if (outer) ::setenv("ZT_BF16_WEIGHT_PACKS", outer_value.c_str(), 1);
}

// The bf16 attention (bf16_attention.h) against the fp64 kernels on the bf16-rounded inputs: GPT-2's
// packed qkv, grouped-query attention (4 query heads on 2 kv heads) and a KV cache (7 queries over
// 19 keys). The probabilities and d(scores) are rounded to bf16 before their products, as a GPU's
// flash attention rounds them, so the tolerance is bf16's (nmse 1e-4); a wrong scale, mask or
// transpose is off by 1e-2 or more.
TEST(Bf16Attention, MatchesTheFp64Kernels) {
  const std::unique_ptr<cpu::Bf16Gemm> gemm = cpu::Bf16Gemm::make_if_supported();
  if (!gemm) GTEST_SKIP() << "this CPU has no bf16 GEMM instructions (AVX512-BF16 or AMX; or ZT_CPU_ISA=avx2)";
  auto f64 = cpu::make_kernels_f64();
  constexpr double kTol = 1e-4;
  auto rounded = [](size_t n, uint32_t seed) {  // bf16 values and their doubles
    std::vector<bf16> h(n);
    std::vector<double> d(n);
    const std::vector<float> f = randn(n, seed);
    for (size_t i = 0; i < n; ++i) {
      h[i] = to_bf16(f[i]);
      d[i] = to_float(h[i]);
    }
    return std::pair{h, d};
  };
  auto nmse = [](const std::vector<bf16>& got, const std::vector<double>& want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (double(to_float(got[i])) - want[i]) * (double(to_float(got[i])) - want[i]);
      ref += want[i] * want[i];
    }
    return err / ref;
  };
  {  // GPT-2's packed qkv [B, T, 3C] and out [B, T, C]; T crosses the 64-query blocks
    const int B = 2, T = 70, C = 64, NH = 4, hs = C / NH;
    auto [qkv, qkvd] = rounded(size_t(B) * T * 3 * C, 51);
    auto [d, dd] = rounded(size_t(B) * T * C, 52);
    std::vector<double> o(size_t(B) * T * C), att(size_t(B) * NH * T * T), dq(qkvd.size());
    f64->attention_forward(o.data(), att.data(), qkvd.data(), B, T, C, NH);
    f64->attention_backward(dq.data(), dd.data(), o.data(), qkvd.data(), att.data(), B, T, C, NH);
    std::vector<bf16> out(o.size()), dqkv(dq.size(), to_bf16(7.0f));  // dqkv overwritten
    std::vector<float> lse(size_t(B) * NH * T);
    const cpu::AttentionShape s{B, T, T, NH, NH, hs, 3 * size_t(C), 3 * size_t(C), size_t(C)};
    cpu::bf16_attention_forward(*gemm, s, out.data(), lse.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C);
    EXPECT_LT(nmse(out, o), kTol) << "packed forward";
    cpu::bf16_attention_backward(*gemm, s, dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, d.data(), out.data(),
                                 qkv.data(), qkv.data() + C, qkv.data() + 2 * C, lse.data());
    EXPECT_LT(nmse(dqkv, dq), kTol) << "packed backward";
    for (int b = 0; b < B; ++b) {  // the logsumexp: exp(score - lse) is the fp64 probability
      for (int t = 0; t < T; t += 9) {
        const double* q = qkvd.data() + (size_t(b) * T + t) * 3 * C;
        const double* k = qkvd.data() + size_t(b) * T * 3 * C + C;
        double score = 0;
        for (int i = 0; i < hs; ++i) score += q[i] * k[i];  // head 0, key 0
        score /= std::sqrt(double(hs));
        EXPECT_NEAR(std::exp(score - lse[size_t(b) * NH * T + t]), att[(size_t(b) * NH * T + t) * T], 1e-5);
      }
    }
  }
  for (const auto& [Tq, Tk] : {std::pair{69, 69}, std::pair{7, 19}}) {  // grouped-query, a cache
    const int B = 2, NH = 4, NKV = 2, hs = 16;
    const size_t nq = size_t(B) * Tq * NH * hs, nkv = size_t(B) * Tk * NKV * hs;
    auto [q, qd] = rounded(nq, 53);
    auto [k, kd] = rounded(nkv, 54);
    auto [v, vd] = rounded(nkv, 55);
    auto [d, dd] = rounded(nq, 56);
    std::vector<double> o(nq), att(size_t(B) * NH * Tq * Tk), dq(nq), dk(nkv), dv(nkv);
    f64->gqa_attention_forward(o.data(), att.data(), qd.data(), kd.data(), vd.data(), B, Tq, Tk, NH, NKV, hs);
    std::vector<bf16> out(nq);
    std::vector<float> lse(size_t(B) * NH * Tq);
    const cpu::AttentionShape s{B, Tq, Tk, NH, NKV, hs, size_t(NH) * hs, size_t(NKV) * hs, size_t(NH) * hs};
    cpu::bf16_attention_forward(*gemm, s, out.data(), lse.data(), q.data(), k.data(), v.data());
    EXPECT_LT(nmse(out, o), kTol) << Tq << " queries, " << Tk << " keys";
    if (Tq != Tk) continue;  // the backward is training's
    f64->gqa_attention_backward(dq.data(), dk.data(), dv.data(), dd.data(), o.data(), qd.data(), kd.data(), vd.data(),
                                att.data(), B, Tq, NH, NKV, hs);
    std::vector<bf16> gq(nq, to_bf16(7.0f)), gk(nkv, to_bf16(7.0f)), gv(nkv, to_bf16(7.0f));
    cpu::bf16_attention_backward(*gemm, s, gq.data(), gk.data(), gv.data(), d.data(), out.data(), q.data(), k.data(),
                                 v.data(), lse.data());
    EXPECT_LT(nmse(gq, dq), kTol) << "dq";
    EXPECT_LT(nmse(gk, dk), kTol) << "dk";
    EXPECT_LT(nmse(gv, dv), kTol) << "dv";
  }
}

}  // namespace
}  // namespace zt
