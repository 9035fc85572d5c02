// Causal multi-head attention as plain kernels: one warp per (batch, head, time) row, which is the
// CPU's loop nest (cpu_kernels.inc) spread over warps, sums in the same order where it is cheap.
// Memory is O(B NH T^2) as on the CPU (the saved probabilities, and in backward a scratch matrix
// of the same size); the fused cuDNN path replaces this later.
//
// Backward is deterministic without atomics: pass 1 (per query row t) computes the softmax
// gradient dpre[t][t2] into scratch and dq_t; pass 2 (per key row t2) sums dk_t2 and dv_t2 over
// the query rows t >= t2 in ascending order, as the CPU does.
#include "backend/cuda/cuda_attention.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel_utils.cuh"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

/// Where one warp's (b, h, t) row sits. `row` counts rows in att's order: ((b NH) + h) T + t.
struct HeadRow {
  int b, h, t;
  __device__ HeadRow(size_t row, int T, int NH)
      : b(int(row / T / NH)), h(int(row / T % NH)), t(int(row % T)) {}
};

// Each lane owns the keys t2 = lane, lane + 32, ... of its query row, so the scores, the max and
// the exponentials need no shuffles until the two warp reductions.
__global__ void attention_forward_kernel(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                                         float scale) {
  extern __shared__ float q_shared[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, hs = C / NH;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NH * T) return;  // the whole warp leaves together
  const HeadRow r(row, T, NH);
  const size_t C3 = 3 * size_t(C);
  const float* head = qkv + size_t(r.b) * T * C3 + size_t(r.h) * hs;  // q of (b, t = 0, h)
  float* q = q_shared + warp * hs;
  for (int i = lane; i < hs; i += kWarp) q[i] = head[r.t * C3 + i];
  __syncwarp();

  float* a = att + row * T;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) {
    const float* k = head + t2 * C3 + C;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
    dot *= scale;
    a[t2] = dot;
    maxval = fmaxf(maxval, dot);
  }
  maxval = warp_max(maxval);
  float sum = 0;
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) {
    const float e = expf(a[t2] - maxval);
    a[t2] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) a[t2] *= inv;
  for (int t2 = r.t + 1 + lane; t2 < T; t2 += kWarp) a[t2] = 0;  // the mask, as the CPU writes it
  __syncwarp();  // every lane reads every probability below

  float* o = out + (size_t(r.b) * T + r.t) * C + size_t(r.h) * hs;
  for (int i = lane; i < hs; i += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= r.t; ++t2) acc += a[t2] * head[t2 * C3 + 2 * C + i];
    o[i] = acc;
  }
}

// Pass 1, per query row t: datt[t2] = dout_t . v_t2, the softmax backward
// dpre[t2] = att[t2] (datt[t2] - sum(att datt)) scale, then dq_t = sum_t2 dpre[t2] k_t2.
__global__ void attention_backward_query_kernel(float* dqkv, float* dpre, const float* dout, const float* qkv,
                                                const float* att, int B, int T, int C, int NH, float scale) {
  extern __shared__ float dout_shared[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, hs = C / NH;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NH * T) return;
  const HeadRow r(row, T, NH);
  const size_t C3 = 3 * size_t(C);
  const float* head = qkv + size_t(r.b) * T * C3 + size_t(r.h) * hs;
  float* d = dout_shared + warp * hs;
  const float* dout_row = dout + (size_t(r.b) * T + r.t) * C + size_t(r.h) * hs;
  for (int i = lane; i < hs; i += kWarp) d[i] = dout_row[i];
  __syncwarp();

  const float* a = att + row * T;
  float* dp = dpre + row * T;
  float inner = 0;
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) {
    const float* v = head + t2 * C3 + 2 * C;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += d[i] * v[i];
    dp[t2] = dot;
    inner += a[t2] * dot;
  }
  inner = warp_sum(inner);
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) dp[t2] = a[t2] * (dp[t2] - inner) * scale;
  __syncwarp();  // every lane reads every dpre below

  float* dq = dqkv + (size_t(r.b) * T + r.t) * C3 + size_t(r.h) * hs;
  for (int i = lane; i < hs; i += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= r.t; ++t2) acc += dp[t2] * head[t2 * C3 + C + i];
    dq[i] = acc;
  }
}

// Pass 2, per key row t2 (the warp's row is read as (b, h, t2)): dk_t2 = sum_{t >= t2} dpre[t][t2] q_t
// and dv_t2 = sum_{t >= t2} att[t][t2] dout_t, ascending in t. dpre and att are read down a column,
// one value for the whole warp per t.
__global__ void attention_backward_key_kernel(float* dqkv, const float* dpre, const float* dout, const float* qkv,
                                              const float* att, int B, int T, int C, int NH) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, hs = C / NH;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NH * T) return;
  const HeadRow r(row, T, NH);
  const int t2 = r.t;
  const size_t C3 = 3 * size_t(C);
  const float* head = qkv + size_t(r.b) * T * C3 + size_t(r.h) * hs;
  const float* dout_head = dout + size_t(r.b) * T * C + size_t(r.h) * hs;
  const size_t column = (row - t2) * T + t2;  // element [t = 0][t2] of this head's T x T matrices
  float* dk = dqkv + (size_t(r.b) * T + t2) * C3 + C + size_t(r.h) * hs;
  float* dv = dk + C;
  for (int i = lane; i < hs; i += kWarp) {
    float acc_k = 0, acc_v = 0;
    for (int t = t2; t < T; ++t) {
      acc_k += dpre[column + size_t(t) * T] * head[t * C3 + i];
      acc_v += att[column + size_t(t) * T] * dout_head[size_t(t) * C + i];
    }
    dk[i] = acc_k;
    dv[i] = acc_v;
  }
}

unsigned attention_blocks(int B, int T, int NH) { return div_up(size_t(B) * NH * T, kWarpsPerBlock); }

void check_heads(int C, int NH) {
  ZT_CHECK(NH > 0 && C % NH == 0, "attention: C=", C, " is not a multiple of NH=", NH);
}

}  // namespace

void launch_attention_forward(CudaContext& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                              int NH) {
  check_heads(C, NH);
  if (size_t(B) * T * C == 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t shared = sizeof(float) * kWarpsPerBlock * hs;
  attention_forward_kernel<<<attention_blocks(B, T, NH), kWarpsPerBlock * kWarp, shared, ctx.compute>>>(
      out, att, qkv, B, T, C, NH, scale);
  ZT_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

void launch_attention_backward(CudaContext& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                               int B, int T, int C, int NH) {
  check_heads(C, NH);
  if (size_t(B) * T * C == 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  auto* dpre = static_cast<float*>(ctx.scratch(sizeof(float) * size_t(B) * NH * T * T));
  const size_t shared = sizeof(float) * kWarpsPerBlock * hs;
  const unsigned blocks = attention_blocks(B, T, NH);
  attention_backward_query_kernel<<<blocks, kWarpsPerBlock * kWarp, shared, ctx.compute>>>(
      dqkv, dpre, dout, qkv, att, B, T, C, NH, scale);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_query_kernel");
  attention_backward_key_kernel<<<blocks, kWarpsPerBlock * kWarp, 0, ctx.compute>>>(dqkv, dpre, dout, qkv, att, B,
                                                                                     T, C, NH);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_key_kernel");
}

}  // namespace zt::cuda
