// The Llama family's kernels of the CUDA KernelOps<bf16> (cuda_kernels_bf16.h): RMSNorm, rotary
// position embedding and SwiGLU over bf16 activations, with cuda_llama_ops.cu's fp32 formulas in
// the same order of operations: bf16 read exactly, fp32 arithmetic, each bf16 output rounded
// once. The fp32 statistics (rstd), rotary tables and weight gradients stay fp32.
//
// Each kernel comes in two widths: N = 8 reads and writes 16 bytes at a time (the shapes of real
// models: C and hs/2 multiples of 8, buffers 16-byte aligned) and N = 1, the fallback for
// anything else. tests/integration/cuda_sass.sh checks the N = 8 ones' SASS for 128-bit loads.
#include <cmath>

#include "backend/cuda/cuda_bf16.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels_bf16.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

unsigned warp_row_blocks(size_t rows) { return div_up(rows, size_t(kThreads / kWarp)); }

// ---- RMSNorm: one warp per row, lane l owns the N-element groups l, l + 32, ... ------------------

// out = weight * (x * rstd), as cuda_llama_ops.cu (HF's product order).
template <int N>
__global__ void __launch_bounds__(kThreads) rmsnorm_forward_bf16_kernel(bf16* out, float* rstd, const bf16* x,
                                                                      const bf16* weight, int rows, int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp leaves together
  const bf16* xr = x + size_t(r) * C;
  float ss = 0;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float v[N];
    load_bf16<N>(xr + c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) ss += v[j] * v[j];
  }
  const float s = 1.0f / sqrtf(warp_sum(ss) / float(C) + eps);
  bf16* o = out + size_t(r) * C;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float v[N], w[N];
    load_bf16<N>(xr + c, v);  // a second read of the row, from L1
    load_bf16<N>(weight + c, w);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = w[j] * (v[j] * s);
    store_bf16<N>(o + c, v);
  }
  if (lane == 0) rstd[r] = s;
}

// dx += s w dy - x s^3 mean(w dy x), per row; dx read as bf16, the sum rounded once.
template <int N>
__global__ void __launch_bounds__(kThreads) rmsnorm_backward_dx_bf16_kernel(bf16* dx, const bf16* dout, const bf16* x,
                                                                          const bf16* weight, const float* rstd,
                                                                          int rows, int C) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const bf16* d = dout + size_t(r) * C;
  const bf16* xr = x + size_t(r) * C;
  const float s = rstd[r];
  float dot = 0;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float dv[N], xv[N], w[N];
    load_bf16<N>(d + c, dv);
    load_bf16<N>(xr + c, xv);
    load_bf16<N>(weight + c, w);
#pragma unroll
    for (int j = 0; j < N; ++j) dot += w[j] * dv[j] * xv[j];
  }
  const float k = warp_sum(dot) / float(C) * s * s * s;
  bf16* dxr = dx + size_t(r) * C;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float dv[N], xv[N], w[N], acc[N];
    load_bf16<N>(d + c, dv);
    load_bf16<N>(xr + c, xv);
    load_bf16<N>(weight + c, w);
    load_bf16<N>(dxr + c, acc);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] += s * w[j] * dv[j] - k * xv[j];
    store_bf16<N>(dxr + c, acc);
  }
}

struct RmsnormWeightTermsBf16 {  // (dout * (x * rstd), 0): the weight's gradient terms
  const bf16* dout;
  const bf16* x;
  const float* rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const size_t i = size_t(r) * C + c;
    return make_float2(bf16_to_float(dout[i]) * (bf16_to_float(x[i]) * rstd[r]), 0.0f);
  }
  __device__ void load8(int r, int c, float2 (&out)[8]) const {
    float d[8], v[8];
    load_bf16<8>(dout + size_t(r) * C + c, d);
    load_bf16<8>(x + size_t(r) * C + c, v);
    const float s = rstd[r];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = make_float2(d[j] * (v[j] * s), 0.0f);
  }
};

// ---- rotary -------------------------------------------------------------------------------------

// One thread per N pairs (i..i+N-1, i+half..i+half+N-1) of one head of one position: n = B T
// heads half / N groups. `sign` is -1 for the inverse rotation (sin(-angle) = -sin(angle), exact).
template <int N>
__global__ void rotary_bf16_kernel(bf16* x, const float* cos, const float* sin, int T, int heads, int half,
                                   float sign, size_t n) {
  const int groups = half / N;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t p = size_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    const int i = int(p % groups) * N;
    const size_t head_row = p / groups;  // ((b T) + t) heads + h
    const int t = int(head_row / heads % T);
    bf16* v = x + head_row * (2 * size_t(half));
    float a[N], z[N], c[N], sn[N];
    load_bf16<N>(v + i, a);
    load_bf16<N>(v + i + half, z);
    load_f32<N>(cos + size_t(t) * half + i, c);
    load_f32<N>(sin + size_t(t) * half + i, sn);
    float ra[N], rz[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float s = sign * sn[j];
      ra[j] = a[j] * c[j] - z[j] * s;
      rz[j] = z[j] * c[j] + a[j] * s;
    }
    store_bf16<N>(v + i, ra);
    store_bf16<N>(v + i + half, rz);
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------
// silu(g) = g / (1 + exp(-g)), as torch.nn.functional.silu, the CPU and cuda_llama_ops.cu write it.

__device__ __forceinline__ float swiglu(float g, float up) { return g / (1.0f + expf(-g)) * up; }

// d/dg [g s(g)] = s (1 + g (1 - s)) with s = sigmoid(g).
__device__ __forceinline__ void swiglu_grad(float d, float g, float up, float& dgate, float& dup) {
  const float s = 1.0f / (1.0f + expf(-g));
  dup = d * g * s;
  dgate = d * up * s * (1.0f + g * (1.0f - s));
}

struct Bf16SwigluForward {
  bf16* out;
  const bf16* gate;
  const bf16* up;
  __device__ void apply(size_t i) const { apply_n<1>(i); }
  template <int N>
  __device__ void apply_vec(size_t i) const { apply_n<N>(i); }
  template <int N>
  __device__ void apply_n(size_t i) const {
    float g[N], u[N];
    load_bf16<N>(gate + i, g);
    load_bf16<N>(up + i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) g[j] = swiglu(g[j], u[j]);
    store_bf16<N>(out + i, g);
  }
};

struct Bf16SwigluBackward {
  bf16* dgate;
  bf16* dup;
  const bf16* dout;
  const bf16* gate;
  const bf16* up;
  __device__ void apply(size_t i) const { apply_n<1>(i); }
  template <int N>
  __device__ void apply_vec(size_t i) const { apply_n<N>(i); }
  template <int N>
  __device__ void apply_n(size_t i) const {
    float d[N], g[N], u[N], dg[N], du[N];
    load_bf16<N>(dout + i, d);
    load_bf16<N>(gate + i, g);
    load_bf16<N>(up + i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) swiglu_grad(d[j], g[j], u[j], dg[j], du[j]);
    store_bf16<N>(dgate + i, dg);
    store_bf16<N>(dup + i, du);
  }
};

}  // namespace

void launch_rmsnorm_forward_bf16(CudaContext& ctx, bf16* out, float* rstd, const bf16* x, const bf16* weight,
                                 int rows, int C, double eps) {
  if (rows <= 0) return;
  const unsigned blocks = warp_row_blocks(size_t(rows));
  if (vec8_ok(size_t(C), {out, x, weight}))
    rmsnorm_forward_bf16_kernel<8><<<blocks, kThreads, 0, ctx.compute>>>(out, rstd, x, weight, rows, C, float(eps));
  else
    rmsnorm_forward_bf16_kernel<1><<<blocks, kThreads, 0, ctx.compute>>>(out, rstd, x, weight, rows, C, float(eps));
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_forward_bf16_kernel");
}

void launch_rmsnorm_backward_bf16(CudaContext& ctx, bf16* dx, float* dweight, const bf16* dout, const bf16* x,
                                  const bf16* weight, const float* rstd, int rows, int C) {
  if (rows <= 0) return;
  const unsigned blocks = warp_row_blocks(size_t(rows));
  const bool vec = vec8_ok(size_t(C), {dx, dout, x, weight});
  if (vec)
    rmsnorm_backward_dx_bf16_kernel<8><<<blocks, kThreads, 0, ctx.compute>>>(dx, dout, x, weight, rstd, rows, C);
  else
    rmsnorm_backward_dx_bf16_kernel<1><<<blocks, kThreads, 0, ctx.compute>>>(dx, dout, x, weight, rstd, rows, C);
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_bf16_kernel");
  const RmsnormWeightTermsBf16 terms{dout, x, rstd, C};
  if (vec) add_column_sums8(ctx, dweight, nullptr, rows, C, terms);
  else add_column_sums(ctx, dweight, nullptr, rows, C, terms);
}

void launch_rotary_bf16(CudaContext& ctx, bf16* x, const float* cos, const float* sin, int B, int T, int heads,
                        int hs, bool inverse) {
  ZT_CHECK(hs % 2 == 0, "rotary: the head size ", hs, " is odd (rotate_half pairs i with i + hs/2)");
  const int half = hs / 2;
  const size_t pairs = size_t(B) * T * heads * half;
  if (pairs == 0) return;
  const float sign = inverse ? -1.0f : 1.0f;
  if (vec8_ok(size_t(half), {x, cos, sin})) {
    const size_t n = pairs / 8;
    rotary_bf16_kernel<8><<<grid_for(n, kThreads, ctx.sm_count), kThreads, 0, ctx.compute>>>(x, cos, sin, T, heads,
                                                                                            half, sign, n);
  } else {
    rotary_bf16_kernel<1><<<grid_for(pairs, kThreads, ctx.sm_count), kThreads, 0, ctx.compute>>>(
        x, cos, sin, T, heads, half, sign, pairs);
  }
  ZT_CUDA_CHECK_LAUNCH("rotary_bf16_kernel");
}

void launch_swiglu_forward_bf16(CudaContext& ctx, bf16* out, const bf16* gate, const bf16* up, size_t n) {
  launch_elementwise<8>(Bf16SwigluForward{out, gate, up}, n, all_aligned16({out, gate, up}), ctx.compute,
                        ctx.sm_count, "swiglu_forward_bf16_kernel");
}

void launch_swiglu_backward_bf16(CudaContext& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                                 const bf16* up, size_t n) {
  launch_elementwise<8>(Bf16SwigluBackward{dgate, dup, dout, gate, up}, n,
                        all_aligned16({dgate, dup, dout, gate, up}), ctx.compute, ctx.sm_count,
                        "swiglu_backward_bf16_kernel");
}

}  // namespace zt::cuda
