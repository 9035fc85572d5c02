// The CPU kernels' bf16 matmul mode (KernelOps::set_matmul_dtype, DeepSpeed's bf16: GEMM inputs
// rounded to bf16, products summed in fp32): every GEMM of the matmul and linear ops against a
// double-precision reference computed here on the bf16-rounded inputs. Products of two bf16
// values are exact in fp32, so the only error left is fp32 summation order: 1e-5 of the largest
// output is ~100 ulp of headroom, while a wrong transpose, operand or rounding is off by 1e-3 or
// more. On a CPU without bf16 instructions (or under ZT_CPU_ISA=avx2) the mode must stay fp32 and
// give fp32's results exactly; the accuracy tests are then skipped with the reason (ctest reports
// the test skipped: SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "random_test_util.h"

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
  auto backend = make_cpu_backend();
  const bool fast = active_cpu_isa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
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

}  // namespace
}  // namespace zt
