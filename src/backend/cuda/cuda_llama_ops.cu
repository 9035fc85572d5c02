// The Llama family's kernels (cuda_llama_ops.h): RMSNorm, rotary position embedding, causal
// grouped-query attention and SwiGLU, as plain kernels with the CPU's formulas (cpu_kernels.inc)
// written in the same order of operations, so the two differ only by summation order and expf.
//
// Nothing here uses atomics: RMSNorm's weight gradient goes through the fixed-order column sums
// (cuda_column_sums.cuh), and attention's dk and dv are summed per kv head over its query heads
// and their rows in the CPU's order, so a run repeats bit for bit on the same GPU.
#include "backend/cuda/cuda_llama_ops.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_kernel_utils.cuh"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

/// Blocks for one warp per row.
unsigned warp_row_blocks(size_t rows, int threads) { return div_up(rows, size_t(threads / kWarp)); }

// ---- RMSNorm: one warp per row ----------------------------------------------------------------

// out = weight * (x * rstd): HF multiplies the normalised x (rounded to the input dtype) by the
// weight, which in fp32 is this product order.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* weight, int rows, int C,
                                       float eps) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp leaves together
  const float* xr = x + size_t(r) * C;
  float ss = 0;
  for (int c = lane; c < C; c += kWarp) ss += xr[c] * xr[c];
  const float s = 1.0f / sqrtf(warp_sum(ss) / float(C) + eps);
  float* o = out + size_t(r) * C;
  for (int c = lane; c < C; c += kWarp) o[c] = weight[c] * (xr[c] * s);
  if (lane == 0) rstd[r] = s;
}

// y = w x s with s = (mean(x^2) + eps)^-1/2: dx += s w dy - x s^3 mean(w dy x), per row.
__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                           const float* rstd, int rows, int C) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* d = dout + size_t(r) * C;
  const float* xr = x + size_t(r) * C;
  const float s = rstd[r];
  float dot = 0;
  for (int c = lane; c < C; c += kWarp) dot += weight[c] * d[c] * xr[c];
  const float k = warp_sum(dot) / float(C) * s * s * s;
  float* dxr = dx + size_t(r) * C;
  for (int c = lane; c < C; c += kWarp) dxr[c] += s * weight[c] * d[c] - k * xr[c];
}

struct RmsnormWeightTerms {  // (dout * (x * rstd), 0): the weight's gradient terms
  const float* dout;
  const float* x;
  const float* rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const size_t i = size_t(r) * C + c;
    return make_float2(dout[i] * (x[i] * rstd[r]), 0.0f);
  }
};

// ---- rotary -----------------------------------------------------------------------------------

// One thread per pair (i, i + half) of one head of one position: n = B T heads half pairs. `sign`
// is -1 for the inverse rotation (sin(-angle) = -sin(angle), exact).
__global__ void rotary_kernel(float* x, const float* cos, const float* sin, int T, int heads, int half, float sign,
                              size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t p = size_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    const int i = int(p % half);
    const size_t head_row = p / half;  // ((b T) + t) heads + h
    const int t = int(head_row / heads % T);
    float* v = x + head_row * (2 * size_t(half));
    const float c = cos[size_t(t) * half + i], sn = sign * sin[size_t(t) * half + i];
    const float a = v[i], z = v[i + half];
    v[i] = a * c - z * sn;
    v[i + half] = z * c + a * sn;
  }
}

// ---- SwiGLU -----------------------------------------------------------------------------------
// silu(g) = g / (1 + exp(-g)), as torch.nn.functional.silu and the CPU write it.

__device__ __forceinline__ float swiglu(float g, float up) { return g / (1.0f + expf(-g)) * up; }

// d/dg [g s(g)] = s (1 + g (1 - s)) with s = sigmoid(g).
__device__ __forceinline__ void swiglu_grad(float d, float g, float up, float& dgate, float& dup) {
  const float s = 1.0f / (1.0f + expf(-g));
  dup = d * g * s;
  dgate = d * up * s * (1.0f + g * (1.0f - s));
}

struct SwigluForwardOp {
  float* out;
  const float* gate;
  const float* up;
  __device__ void apply(size_t i) const { out[i] = swiglu(gate[i], up[i]); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float g[N], u[N];
    load_vec<N>(gate + i, g);
    load_vec<N>(up + i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) g[j] = swiglu(g[j], u[j]);
    store_vec<N>(out + i, g);
  }
};

struct SwigluBackwardOp {
  float* dgate;
  float* dup;
  const float* dout;
  const float* gate;
  const float* up;
  __device__ void apply(size_t i) const { swiglu_grad(dout[i], gate[i], up[i], dgate[i], dup[i]); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float d[N], g[N], u[N], dg[N], du[N];
    load_vec<N>(dout + i, d);
    load_vec<N>(gate + i, g);
    load_vec<N>(up + i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) swiglu_grad(d[j], g[j], u[j], dg[j], du[j]);
    store_vec<N>(dgate + i, dg);
    store_vec<N>(dup + i, du);
  }
};

// ---- grouped-query attention ------------------------------------------------------------------
// One warp per (batch, head, row) as cuda_attention.cu, with q and out [B,T,NH,hs] and k, v
// [B,Tk,NKV,hs] in their own arrays. Memory is O(B NH Tq Tk), the saved probabilities (and in
// backward a scratch matrix of the same size), as on the CPU.

constexpr int kWarpsPerBlock = 4;

/// Where one warp's row sits, rows counted in att's order: ((b heads) + h) rows_per_head + t.
struct HeadRow {
  int b, h, t;
  __device__ HeadRow(size_t row, int rows_per_head, int heads)
      : b(int(row / rows_per_head / heads)), h(int(row / rows_per_head % heads)), t(int(row % rows_per_head)) {}
};

// Query row t sits at position Tk - Tq + t and sees keys 0..that position. Each lane owns keys
// t2 = lane, lane + 32, ..., so the scores, the max and the exponentials need no shuffles until
// the two warp reductions.
__global__ void gqa_forward_kernel(float* out, float* att, const float* q, const float* k, const float* v, int B,
                                   int Tq, int Tk, int NH, int NKV, int hs, float scale) {
  extern __shared__ float q_shared[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NH * Tq) return;  // the whole warp leaves together
  const HeadRow r(row, Tq, NH);
  const int kvh = r.h / (NH / NKV), last = Tk - Tq + r.t;
  const size_t qrow = size_t(NH) * hs, kvrow = size_t(NKV) * hs;
  float* qs = q_shared + warp * hs;
  const float* qv = q + (size_t(r.b) * Tq + r.t) * qrow + size_t(r.h) * hs;
  for (int i = lane; i < hs; i += kWarp) qs[i] = qv[i];
  __syncwarp();

  const float* kb = k + size_t(r.b) * Tk * kvrow + size_t(kvh) * hs;  // (b, t2 = 0, kvh)
  const float* vb = v + size_t(r.b) * Tk * kvrow + size_t(kvh) * hs;
  float* a = att + row * Tk;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= last; t2 += kWarp) {
    const float* kv = kb + size_t(t2) * kvrow;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += qs[i] * kv[i];
    dot *= scale;
    a[t2] = dot;
    maxval = fmaxf(maxval, dot);
  }
  maxval = warp_max(maxval);
  float sum = 0;
  for (int t2 = lane; t2 <= last; t2 += kWarp) {
    const float e = expf(a[t2] - maxval);
    a[t2] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int t2 = lane; t2 <= last; t2 += kWarp) a[t2] *= inv;
  for (int t2 = last + 1 + lane; t2 < Tk; t2 += kWarp) a[t2] = 0;  // the mask, as the CPU writes it
  __syncwarp();  // every lane reads every probability below

  float* o = out + (size_t(r.b) * Tq + r.t) * qrow + size_t(r.h) * hs;
  for (int i = lane; i < hs; i += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= last; ++t2) acc += a[t2] * vb[size_t(t2) * kvrow + i];
    o[i] = acc;
  }
}

// Backward pass 1, per query row t of head h: datt[t2] = dout_t . v_t2, the softmax backward
// dpre[t2] = att[t2] (datt[t2] - sum(att datt)) scale into scratch, then dq_t = sum_t2 dpre[t2] k_t2.
__global__ void gqa_backward_query_kernel(float* dq, float* dpre, const float* dout, const float* k, const float* v,
                                          const float* att, int B, int T, int NH, int NKV, int hs, float scale) {
  extern __shared__ float dout_shared[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NH * T) return;
  const HeadRow r(row, T, NH);
  const int kvh = r.h / (NH / NKV);
  const size_t qrow = size_t(NH) * hs, kvrow = size_t(NKV) * hs;
  const size_t q_at = (size_t(r.b) * T + r.t) * qrow + size_t(r.h) * hs;
  float* d = dout_shared + warp * hs;
  for (int i = lane; i < hs; i += kWarp) d[i] = dout[q_at + i];
  __syncwarp();

  const float* kb = k + size_t(r.b) * T * kvrow + size_t(kvh) * hs;
  const float* vb = v + size_t(r.b) * T * kvrow + size_t(kvh) * hs;
  const float* a = att + row * T;
  float* dp = dpre + row * T;
  float inner = 0;
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) {
    const float* vv = vb + size_t(t2) * kvrow;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += d[i] * vv[i];
    dp[t2] = dot;
    inner += a[t2] * dot;
  }
  inner = warp_sum(inner);
  for (int t2 = lane; t2 <= r.t; t2 += kWarp) dp[t2] = a[t2] * (dp[t2] - inner) * scale;
  __syncwarp();  // every lane reads every dpre below

  for (int i = lane; i < hs; i += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= r.t; ++t2) acc += dp[t2] * kb[size_t(t2) * kvrow + i];
    dq[q_at + i] = acc;
  }
}

// Backward pass 2, per key row t2 of kv head kvh (the warp's row is read as (b, kvh, t2)):
// dk_t2 = sum over the group's query heads h, then t >= t2, of dpre[h][t][t2] q_{t,h}, and dv_t2
// the same with att[h][t][t2] dout_{t,h}: the CPU's order (heads outer, rows ascending). dpre and
// att are read down a column, one value for the whole warp per (h, t).
__global__ void gqa_backward_key_kernel(float* dk, float* dv, const float* dpre, const float* dout, const float* q,
                                        const float* att, int B, int T, int NH, int NKV, int hs) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const size_t row = size_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= size_t(B) * NKV * T) return;
  const HeadRow r(row, T, NKV);
  const int kvh = r.h, t2 = r.t, group = NH / NKV;
  const size_t qrow = size_t(NH) * hs, kvrow = size_t(NKV) * hs;
  const size_t kv_at = (size_t(r.b) * T + t2) * kvrow + size_t(kvh) * hs;
  for (int i = lane; i < hs; i += kWarp) {
    float acc_k = 0, acc_v = 0;
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const size_t column = (size_t(r.b) * NH + h) * T * T + t2;  // element [t = 0][t2] of head h's matrices
      const size_t head_at = size_t(r.b) * T * qrow + size_t(h) * hs + i;  // (b, t = 0, h), element i
      for (int t = t2; t < T; ++t) {
        acc_k += dpre[column + size_t(t) * T] * q[head_at + size_t(t) * qrow];
        acc_v += att[column + size_t(t) * T] * dout[head_at + size_t(t) * qrow];
      }
    }
    dk[kv_at + i] = acc_k;
    dv[kv_at + i] = acc_v;
  }
}

void check_gqa_heads(int NH, int NKV, int hs) {
  ZT_CHECK(NKV > 0 && NH % NKV == 0, "gqa_attention: NH=", NH, " is not a multiple of NKV=", NKV);
  ZT_CHECK(hs > 0, "gqa_attention: head size ", hs);
}

}  // namespace

void launch_rmsnorm_forward(CudaContext& ctx, float* out, float* rstd, const float* x, const float* weight, int rows,
                            int C, double eps) {
  if (rows <= 0) return;
  rmsnorm_forward_kernel<<<warp_row_blocks(size_t(rows), kThreads), kThreads, 0, ctx.compute>>>(
      out, rstd, x, weight, rows, C, float(eps));
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void launch_rmsnorm_backward(CudaContext& ctx, float* dx, float* dweight, const float* dout, const float* x,
                             const float* weight, const float* rstd, int rows, int C) {
  if (rows <= 0) return;
  rmsnorm_backward_dx_kernel<<<warp_row_blocks(size_t(rows), kThreads), kThreads, 0, ctx.compute>>>(
      dx, dout, x, weight, rstd, rows, C);
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
  add_column_sums(ctx, dweight, nullptr, rows, C, RmsnormWeightTerms{dout, x, rstd, C});
}

void launch_rotary(CudaContext& ctx, float* x, const float* cos, const float* sin, int B, int T, int heads, int hs,
                   bool inverse) {
  ZT_CHECK(hs % 2 == 0, "rotary: the head size ", hs, " is odd (rotate_half pairs i with i + hs/2)");
  const int half = hs / 2;
  const size_t n = size_t(B) * T * heads * half;
  if (n == 0) return;
  rotary_kernel<<<grid_for(n, kThreads, ctx.sm_count), kThreads, 0, ctx.compute>>>(x, cos, sin, T, heads, half,
                                                                                   inverse ? -1.0f : 1.0f, n);
  ZT_CUDA_CHECK_LAUNCH("rotary_kernel");
}

void launch_gqa_attention_forward(CudaContext& ctx, float* out, float* att, const float* q, const float* k,
                                  const float* v, int B, int Tq, int Tk, int NH, int NKV, int hs) {
  check_gqa_heads(NH, NKV, hs);
  ZT_CHECK(Tk >= Tq, "gqa_attention_forward: Tk=", Tk, " < Tq=", Tq, " (the keys include the queries' positions)");
  const size_t rows = size_t(B) * NH * Tq;
  if (rows == 0) return;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t shared = sizeof(float) * kWarpsPerBlock * hs;
  gqa_forward_kernel<<<div_up(rows, kWarpsPerBlock), kWarpsPerBlock * kWarp, shared, ctx.compute>>>(
      out, att, q, k, v, B, Tq, Tk, NH, NKV, hs, scale);
  ZT_CUDA_CHECK_LAUNCH("gqa_forward_kernel");
}

void launch_gqa_attention_backward(CudaContext& ctx, float* dq, float* dk, float* dv, const float* dout,
                                   const float* q, const float* k, const float* v, const float* att, int B, int T,
                                   int NH, int NKV, int hs) {
  check_gqa_heads(NH, NKV, hs);
  const size_t query_rows = size_t(B) * NH * T, key_rows = size_t(B) * NKV * T;
  if (query_rows == 0) return;
  const float scale = 1.0f / std::sqrt(float(hs));
  auto* dpre = static_cast<float*>(ctx.scratch(sizeof(float) * query_rows * T));
  const size_t shared = sizeof(float) * kWarpsPerBlock * hs;
  gqa_backward_query_kernel<<<div_up(query_rows, kWarpsPerBlock), kWarpsPerBlock * kWarp, shared, ctx.compute>>>(
      dq, dpre, dout, k, v, att, B, T, NH, NKV, hs, scale);
  ZT_CUDA_CHECK_LAUNCH("gqa_backward_query_kernel");
  gqa_backward_key_kernel<<<div_up(key_rows, kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, ctx.compute>>>(
      dk, dv, dpre, dout, q, att, B, T, NH, NKV, hs);
  ZT_CUDA_CHECK_LAUNCH("gqa_backward_key_kernel");
}

void launch_swiglu_forward(CudaContext& ctx, float* out, const float* gate, const float* up, size_t n) {
  launch_elementwise<4>(SwigluForwardOp{out, gate, up}, n, all_aligned16({out, gate, up}), ctx.compute, ctx.sm_count,
                        "swiglu_forward_kernel");
}

void launch_swiglu_backward(CudaContext& ctx, float* dgate, float* dup, const float* dout, const float* gate,
                            const float* up, size_t n) {
  launch_elementwise<4>(SwigluBackwardOp{dgate, dup, dout, gate, up}, n, all_aligned16({dgate, dup, dout, gate, up}),
                        ctx.compute, ctx.sm_count, "swiglu_backward_kernel");
}

}  // namespace zt::cuda
