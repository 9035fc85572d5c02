// Batch-invariant GEMMs (cuda_invariant_gemm.h). A block of rows shares each weight it loads;
// a row's arithmetic is the same whichever block it falls in and wherever in it, and one thread
// (nn) or one warp (nt) computes an element whole. __fmaf_rn and __fadd_rn are written out so
// that nvcc's contraction cannot differ between two copies of a loop.
#include "backend/cuda/cuda_invariant_gemm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel_utils.cuh"

namespace zt::cuda {
namespace {

constexpr int kRows = 4;       // rows of x a block computes
constexpr int kThreads = 256;  // nt: 8 warps, a weight row each; nn: 256 columns

__global__ void invariant_nt_kernel(float* out, const float* x, const float* w, const float* bias, int M, int N,
                                    int K) {
  const int lane = threadIdx.x % kWarp;
  const int n = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int m0 = blockIdx.y * kRows;
  if (n >= N) return;  // the whole warp leaves together
  const float* wr = w + size_t(n) * K;
  float acc[kRows] = {};
  for (int k = lane; k < K; k += kWarp) {
    const float wk = wr[k];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (m0 + i < M) acc[i] = __fmaf_rn(x[size_t(m0 + i) * K + k], wk, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float s = acc[i];
    for (int offset = kWarp / 2; offset > 0; offset /= 2) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, offset));
    if (lane == 0 && m0 + i < M) out[size_t(m0 + i) * N + n] = bias ? __fadd_rn(s, bias[n]) : s;
  }
}

__global__ void invariant_nn_kernel(float* out, const float* x, const float* w, const float* bias, int M, int N,
                                    int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m0 = blockIdx.y * kRows;
  if (n >= N) return;
  float acc[kRows] = {};
  for (int k = 0; k < K; ++k) {
    const float wk = w[size_t(k) * N + n];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (m0 + i < M) acc[i] = __fmaf_rn(x[size_t(m0 + i) * K + k], wk, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (m0 + i < M) out[size_t(m0 + i) * N + n] = bias ? __fadd_rn(acc[i], bias[n]) : acc[i];
  }
}

}  // namespace

void launch_invariant_gemm_nt(CudaContext& ctx, float* out, const float* x, const float* w, const float* bias, int M,
                              int N, int K) {
  if (M == 0 || N == 0) return;
  const dim3 grid(div_up(size_t(N), kThreads / kWarp), div_up(size_t(M), kRows));
  invariant_nt_kernel<<<grid, kThreads, 0, ctx.compute>>>(out, x, w, bias, M, N, K);
  ZT_CUDA_CHECK_LAUNCH("invariant_nt_kernel");
}

void launch_invariant_gemm_nn(CudaContext& ctx, float* out, const float* x, const float* w, const float* bias, int M,
                              int N, int K) {
  if (M == 0 || N == 0) return;
  const dim3 grid(div_up(size_t(N), kThreads), div_up(size_t(M), kRows));
  invariant_nn_kernel<<<grid, kThreads, 0, ctx.compute>>>(out, x, w, bias, M, N, K);
  ZT_CUDA_CHECK_LAUNCH("invariant_nn_kernel");
}

}  // namespace zt::cuda
