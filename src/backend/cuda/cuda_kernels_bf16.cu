// KernelOps<bf16> on the device: a bf16 model's kernels (kernel_ops.h), on ctx.compute, never
// synchronising the host. Activations, their gradients and the weights' working copies are bf16;
// parameter gradients, norm statistics, attention probabilities, losses and rotary tables are fp32.
// Each op reads bf16 exactly, computes in fp32 with the fp32 kernels' formulas (cuda_kernels.cu,
// cuda_llama_ops.cu) and rounds each bf16 output once, to nearest even; an output the op adds to
// (layernorm's dx, accumulate, a GEMM's accumulated dx) is read as bf16, added to in fp32 and
// rounded once. That is the CPU's widened bf16 table (cpu/widened_bf16_kernels.cpp) op for op.
//
// - GEMMs: cuBLASLt with bf16 A and B and fp32 accumulation (tensor cores); the forward writes
//   bf16 with the bias fused (BIAS epilogue, bf16 bias), dx is bf16, and dweight is fp32 with
//   D += (beta = 1), so the fp32 gradient never passes through bf16.
//   The fused pairs of kernel_ops.h are epilogues too: a residual projection adds the residual as
//   the GEMM's C, and GPT-2's MLP runs its GELU (GELU_AUX_BIAS) and the GELU's backward (DGELU)
//   inside the GEMMs. Those round once where the CPU's composed ops round twice.
// - Bias gradients: a deterministic column sum over the bf16 dout, 16 bytes a row per thread
//   (cuda_bf16.cuh). cuBLASLt's BGRADA epilogue could fuse it into the dweight GEMM, but it
//   writes rather than adds (so a scratch vector and an add kernel besides) and its reduction
//   order is the library's; the column sum reads dout once more, which is cheap next to the GEMM.
// - Elementwise ops (GELU, residual, accumulate, SwiGLU, embedding, rotary): one pass, 8 values
//   (16 bytes) per access when the pointers are 16-byte aligned, a scalar tail or fallback else.
// - LayerNorm/RMSNorm: one warp per row, fp32 statistics, 16-byte accesses when C % 8 == 0.
// - The classifier (softmax_xent): one block per row over the bf16 logits in place, each row
//   split into an unaligned head, a 16-byte body and a tail (a dense odd V, as GPT-2's 50257,
//   leaves rows at every alignment). The probabilities are written once, rounded from the fp32
//   exp(l - max) / sum. classifier_forward/backward keep the logits with a row stride of V rounded
//   up to 64 (padded_logits_stride) and run the lm_head's three GEMMs over that padded width, with
//   the head padded by zero rows: with an odd V in any GEMM dimension cuBLASLt runs kernels 5-7x
//   slower. The softmax's rows are all body and tail; it never reads the padding columns.
//   classifier_forward_backward (training) writes the loss's gradient in the softmax's last pass
//   instead of the probabilities, with the same arithmetic as the two kernels it replaces.
// - Attention: cuda_attention_bf16.cu, flash attention (cuda_flash_attention.cu) saving only the
//   logsumexp of each row (attention_saves_lse), with an exact widened-fp32 fallback for the shapes
//   it does not take.
//
// Sums that cross rows are computed per column in a fixed order rather than with atomics, as in
// the fp32 table, so a run repeats bit for bit on the same GPU.
#include <cmath>
#include <memory>
#include <optional>

#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_bf16.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernels_bf16.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

// ---- embedding ----------------------------------------------------------------------------------

// out[bt, c..c+N-1] = wte[token, ...] (+ wpe[t, ...]); one thread per N channels of a row.
template <int N>
__global__ void embedding_forward_bf16_kernel(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                                              int T, int C, size_t groups) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const size_t i = g * N, bt = i / C;
    const int c = int(i % C), t = int(bt % T);
    float w[N];
    load_bf16<N>(wte + size_t(tokens[bt]) * C + c, w);
    if (wpe) {  // without positions the row is copied (bf16 -> fp32 -> bf16 is exact, -0 included)
      float p[N];
      load_bf16<N>(wpe + size_t(t) * C + c, p);
#pragma unroll
      for (int j = 0; j < N; ++j) w[j] += p[j];
    }
    store_bf16<N>(out + i, w);
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ...: one thread per N channels of one t.
template <int N>
__global__ void embedding_backward_wpe_bf16_kernel(float* dwpe, const bf16* dout, int B, int T, int C) {
  const size_t n = size_t(T) * C, groups = n / N, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const size_t i = g * N;
    float acc[N];
    load_f32<N>(dwpe + i, acc);
    for (int b = 0; b < B; ++b) {
      float d[N];
      load_bf16<N>(dout + size_t(b) * n + i, d);
#pragma unroll
      for (int j = 0; j < N; ++j) acc[j] += d[j];
    }
    store_f32<N>(dwpe + i, acc);
  }
}

// cuda_kernels.cu's token links: head[r] is 1 when no earlier row has r's token, next[r] is the
// next row with the same token (-1 at the end).
__global__ void embedding_token_links_bf16_kernel(int* head, int* next, const int32_t* tokens, int rows) {
  __shared__ int32_t tile[kThreads];
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  const int32_t token = r < rows ? tokens[r] : -1;
  bool first = true;
  int following = -1;
  for (int base = 0; base < rows; base += kThreads) {
    __syncthreads();
    if (base + int(threadIdx.x) < rows) tile[threadIdx.x] = tokens[base + threadIdx.x];
    __syncthreads();
    const int count = min(kThreads, rows - base);
    for (int j = 0; j < count; ++j) {
      const int other = base + j;
      if (tile[j] != token || other == r) continue;
      if (other < r) first = false;
      else if (following < 0) following = other;  // the scan ascends: the first later match is the next
    }
  }
  if (r < rows) {
    head[r] = first ? 1 : 0;
    next[r] = following;
  }
}

// dwte[token] += dout[r] for the rows r of each token in ascending order (the CPU's and the fp32
// table's order): the block of a token's first row walks the token's chain, N channels a thread.
template <int N>
__global__ void embedding_backward_wte_bf16_kernel(float* dwte, const bf16* dout, const int32_t* tokens,
                                                   const int* head, const int* next, int C) {
  const int first = blockIdx.x;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * N;
  if (!head[first] || c >= C) return;
  float* w = dwte + size_t(tokens[first]) * C + c;
  float acc[N];
  load_f32<N>(w, acc);
  for (int r = first; r >= 0; r = next[r]) {
    float d[N];
    load_bf16<N>(dout + size_t(r) * C + c, d);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] += d[j];
  }
  store_f32<N>(w, acc);
}

// ---- layernorm: one warp per row, lane l owns the N-element groups l, l + 32, ... ----------------
// The row is read again for each pass (from L1: a GPT-2 row is 1.5 KiB).

template <int N>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_bf16_kernel(bf16* out, float* mean, float* rstd, const bf16* x, const bf16* weight,
                                  const bf16* bias, int rows, int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp leaves together
  const bf16* xr = x + size_t(r) * C;
  float sum = 0;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float v[N];
    load_bf16<N>(xr + c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) sum += v[j];
  }
  const float m = warp_sum(sum) / float(C);
  float var = 0;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float v[N];
    load_bf16<N>(xr + c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) var += (v[j] - m) * (v[j] - m);
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
  bf16* o = out + size_t(r) * C;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float v[N], w[N], b[N];
    load_bf16<N>(xr + c, v);
    load_bf16<N>(weight + c, w);
    load_bf16<N>(bias + c, b);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = (v[j] - m) * s * w[j] + b[j];
    store_bf16<N>(o + c, v);
  }
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx += (w d - mean(w d) - norm mean(w d norm)) rstd, per row; dx read as bf16, rounded once.
template <int N>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_dx_bf16_kernel(bf16* dx, const bf16* dout, const bf16* x, const bf16* weight,
                                      const float* mean, const float* rstd, int rows, int C) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const bf16* d = dout + size_t(r) * C;
  const bf16* xr = x + size_t(r) * C;
  const float m = mean[r], s = rstd[r];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float dv[N], xv[N], w[N];
    load_bf16<N>(d + c, dv);
    load_bf16<N>(xr + c, xv);
    load_bf16<N>(weight + c, w);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float dnorm = w[j] * dv[j];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (xv[j] - m) * s;
    }
  }
  dnorm_mean = warp_sum(dnorm_mean) / float(C);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / float(C);
  bf16* dxr = dx + size_t(r) * C;
  for (int c = lane * N; c < C; c += kWarp * N) {
    float dv[N], xv[N], w[N], acc[N];
    load_bf16<N>(d + c, dv);
    load_bf16<N>(xr + c, xv);
    load_bf16<N>(weight + c, w);
    load_bf16<N>(dxr + c, acc);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float norm = (xv[j] - m) * s;
      acc[j] += (w[j] * dv[j] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    store_bf16<N>(dxr + c, acc);
  }
}

struct LayernormParamTermsBf16 {  // (norm * dout, dout): the weight's and the bias's gradient terms
  const bf16* dout;
  const bf16* x;
  const float* mean;
  const float* rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const size_t i = size_t(r) * C + c;
    const float d = bf16_to_float(dout[i]);
    return make_float2((bf16_to_float(x[i]) - mean[r]) * rstd[r] * d, d);
  }
  __device__ void load8(int r, int c, float2 (&out)[8]) const {
    float d[8], v[8];
    load_bf16<8>(dout + size_t(r) * C + c, d);
    load_bf16<8>(x + size_t(r) * C + c, v);
    const float m = mean[r], s = rstd[r];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = make_float2((v[j] - m) * s * d[j], d[j]);
  }
};

// ---- bias gradients -----------------------------------------------------------------------------

/// Column sums of a bf16 matrix m[rows, cols] (a bias gradient): (m[r, c], 0).
struct Bf16MatrixTerms {
  const bf16* m;
  int cols;
  __device__ float2 operator()(int r, int c) const { return make_float2(bf16_to_float(m[size_t(r) * cols + c]), 0.0f); }
  __device__ void load8(int r, int c, float2 (&out)[8]) const {
    float v[8];
    load_bf16<8>(m + size_t(r) * cols + c, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = make_float2(v[j], 0.0f);
  }
};

/// dbias[c] += sum_r m[r, c] for a bf16 m[rows, cols]: 16-byte loads when the shape and pointer allow.
void add_bf16_column_sums(CudaContext& ctx, float* dbias, const bf16* m, int rows, int cols) {
  if (vec8_ok(size_t(cols), {m})) add_column_sums8(ctx, dbias, nullptr, rows, cols, Bf16MatrixTerms{m, cols});
  else add_column_sums(ctx, dbias, nullptr, rows, cols, Bf16MatrixTerms{m, cols});
}

// ---- elementwise --------------------------------------------------------------------------------
// GELU with the tanh approximation as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the CPU's
// and cuda_kernels.cu's formula.

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gelu_grad(float x, float dout) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));  // sigmoid(2u) = (1 + tanh u) / 2
  const float du = kGeluK * (1.0f + float(3 * 0.044715) * x * x);
  return dout * (s + x * 2.0f * s * (1.0f - s) * du);
}

// The ops of launch_elementwise<8> (cuda_kernel_utils.cuh): apply(i) for one element, apply_vec<8>
// for 8 from one 16-byte access per operand.
struct Bf16GeluForward {
  bf16* out;
  const bf16* x;
  __device__ void apply(size_t i) const { apply_n<1>(i); }
  template <int N>
  __device__ void apply_vec(size_t i) const { apply_n<N>(i); }
  template <int N>
  __device__ void apply_n(size_t i) const {
    float v[N];
    load_bf16<N>(x + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = gelu(v[j]);
    store_bf16<N>(out + i, v);
  }
};

struct Bf16GeluBackward {
  bf16* dx;
  const bf16* x;
  const bf16* dout;
  __device__ void apply(size_t i) const { apply_n<1>(i); }
  template <int N>
  __device__ void apply_vec(size_t i) const { apply_n<N>(i); }
  template <int N>
  __device__ void apply_n(size_t i) const {
    float v[N], d[N];
    load_bf16<N>(x + i, v);
    load_bf16<N>(dout + i, d);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = gelu_grad(v[j], d[j]);
    store_bf16<N>(dx + i, v);
  }
};

struct Bf16Add {  // out = a + b (out may be a: accumulate)
  bf16* out;
  const bf16* a;
  const bf16* b;
  __device__ void apply(size_t i) const { apply_n<1>(i); }
  template <int N>
  __device__ void apply_vec(size_t i) const { apply_n<N>(i); }
  template <int N>
  __device__ void apply_n(size_t i) const {
    float u[N], v[N];
    load_bf16<N>(a + i, u);
    load_bf16<N>(b + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) u[j] += v[j];
    store_bf16<N>(out + i, u);
  }
};

// out[r, c] = bias[c]: the bias for a GEMM that then accumulates, when cuBLASLt's epilogue cannot
// read the bias (not 16-byte aligned). A copy of bf16 values, exact.
__global__ void broadcast_rows_bf16_kernel(bf16* out, const bf16* bias, int rows, int cols) {
  const size_t n = size_t(rows) * cols, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = bias[i % cols];
}

// ---- softmax cross-entropy ----------------------------------------------------------------------

template <int N, bool Write, typename F>
__device__ __forceinline__ void visit_bf16(bf16* p, int v, F& f) {
  float x[N];
  load_bf16<N>(p, x);
  f(x, v);
  if constexpr (Write) store_bf16<N>(p, x);
}

/// f(values, v) over a row l[0..V) of bf16, the block's threads side by side: the elements before
/// the first 16-byte boundary one at a time, then 8 at a time, then the tail one at a time. With
/// Write, what f leaves in the values is rounded and stored back.
template <bool Write, typename F>
__device__ __forceinline__ void for_row_bf16(bf16* l, int V, F&& f) {
  const int head = min(V, int(((16u - unsigned(reinterpret_cast<uintptr_t>(l) & 15u)) & 15u) / 2u));
  const int body_end = head + (V - head) / 8 * 8;
  for (int v = threadIdx.x; v < head; v += blockDim.x) visit_bf16<1, Write>(l + v, v, f);
  for (int v = head + threadIdx.x * 8; v < body_end; v += blockDim.x * 8) visit_bf16<8, Write>(l + v, v, f);
  for (int v = body_end + threadIdx.x; v < V; v += blockDim.x) visit_bf16<1, Write>(l + v, v, f);
}

/// The loss's gradient at column v of a row whose target is `target` (-1: none), from the
/// column's probability p: (p - onehot(target)) d with the CPU's two roundings (p d, then - d)
/// kept apart from an FMA; 0 in a row with no target.
__device__ __forceinline__ float xent_dlogit(float p, int v, int target, float d) {
  float g = target < 0 ? 0.0f : __fmul_rn(p, d);
  if (v == target) g = __fsub_rn(g, d);
  return g;
}

/// Columns V..zero_to-1 of the row l set to +0 by the block's threads: the classifier's padding,
/// which its padded GEMMs read as dlogits.
__device__ __forceinline__ void zero_padding_bf16(bf16* l, int V, int zero_to) {
  for (int v = V + int(threadIdx.x); v < zero_to; v += blockDim.x) l[v] = bf16{0};
}

// One block per row: the max and the sum of exponentials (one pass), then the probabilities
// exp(l - max) / sum written over the logits, rounded once (exp(l - max) is recomputed rather
// than stored: a bf16 store of it would round twice). The row's loss from the target logit read before any write.
// Row r is l[r * stride, r * stride + V): stride = V for dense logits, padded_logits_stride(V) for
// the classifier's. kGrad (classifier_forward_backward): the last pass writes the loss's gradient
// instead, (p - onehot(target)) d from the bf16-rounded p with softmax_xent_backward_bf16_kernel's
// arithmetic (the same bits as the two kernels, one pass over memory fewer), and zeroes the
// columns V..zero_to-1.
template <bool kGrad>
__global__ void __launch_bounds__(512)
    softmax_xent_forward_bf16_kernel(bf16* logits, float* losses, const int32_t* targets, int V, size_t stride,
                                     int zero_to, float d) {
  __shared__ float shared_f[kWarp];
  const int r = blockIdx.x;
  bf16* l = logits + size_t(r) * stride;
  const int target = targets[r];
  const float target_logit = target >= 0 ? bf16_to_float(l[target]) : 0.0f;  // read before any thread writes l
  // One read for the max and the sum (online softmax: each thread's sum of exp(l - m) over its
  // own running max m, rescaled when m grows), then the block's max and each thread's sum rescaled
  // to it: a pass over the row fewer than a max pass then a sum pass.
  float m = -INFINITY, part = 0;
  for_row_bf16<false>(l, V, [&](auto& x, int) {
    for (float e : x) {
      if (e > m) {
        part = part * expf(m - e) + 1.0f;  // m = -inf: part is 0, exp(-inf) 0
        m = e;
      } else if (e != -INFINITY) {  // a -inf logit adds 0 (and -inf - -inf would be NaN)
        part += expf(e - m);
      }
    }
  });
  const float maxval = block_max(m, shared_f);  // its barriers also order the reads above before the writes below
  // part is 0 exactly where this thread saw only -inf: it adds 0 (exp(-inf - maxval) could be
  // NaN); a NaN it saw stays NaN in the sum, so the loss says so, as the two-pass form did.
  const float sum = block_sum(part == 0.0f ? 0.0f : part * expf(m - maxval), shared_f);
  const float inv = 1.0f / sum;
  if constexpr (kGrad) {
    zero_padding_bf16(l, V, zero_to);
    for_row_bf16<true>(l, V, [&](auto& x, int v) {
      int j = 0;
      for (float& e : x) {
        e = xent_dlogit(bf16_to_float(float_to_bf16(expf(e - maxval) * inv)), v + j, target, d);
        ++j;
      }
    });
  } else {
    for_row_bf16<true>(l, V, [&](auto& x, int) {
      for (float& e : x) e = expf(e - maxval) * inv;
    });
  }
  // -log softmax[target] = log(sum exp(l - max)) + max - l[target]
  if (threadIdx.x == 0) losses[r] = target >= 0 ? logf(sum) + maxval - target_logit : 0.0f;
}

// acc[i] += x[i], fp32 (the last tile of the padded classifier's dhead onto the gradient).
__global__ void add_f32_kernel(float* acc, const float* x, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc[i] += x[i];
}

// *loss_sum += weight * (sum of the losses in double), by one block in a fixed order.
__global__ void add_loss_sum_bf16_kernel(double* loss_sum, const float* losses, int rows, double weight) {
  __shared__ double shared_d[kWarp];
  double acc = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) acc += double(losses[r]);
  acc = block_sum(acc, shared_d);
  if (threadIdx.x == 0) *loss_sum += weight * acc;
}

// The probabilities to the loss's gradient per row, in place (xent_dlogit), rounded once to bf16.
// Rows `stride` apart, as in the forward; columns V..zero_to-1 of each row are set to +0 (the
// classifier's padding: zero whatever the forward left there).
__global__ void softmax_xent_backward_bf16_kernel(bf16* probs, const int32_t* targets, int V, size_t stride,
                                                  int zero_to, float d) {
  const int r = blockIdx.x;
  const int target = targets[r];
  bf16* l = probs + size_t(r) * stride;
  zero_padding_bf16(l, V, zero_to);
  for_row_bf16<true>(l, V, [&](auto& x, int v) {
    int j = 0;
    for (float& e : x) {
      e = xent_dlogit(e, v + j, target, d);
      ++j;
    }
  });
}

// ---- the op table -------------------------------------------------------------------------------

class CudaKernelsBf16 final : public KernelOps<bf16> {
 public:
  explicit CudaKernelsBf16(CudaContext& ctx) : ctx_(ctx) {}

  // The GEMMs' inputs are bf16 whatever is asked: a bf16 model's activations and weights are.
  DType set_matmul_dtype(DType) override { return DType::kBF16; }

  void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T_,
                         int C) override {
    const size_t n = size_t(B) * T_ * C;
    if (n == 0) return;
    if (vec8_ok(size_t(C), {out, wte, wpe}))
      embedding_forward_bf16_kernel<8><<<grid(n / 8), kThreads, 0, ctx_.compute>>>(out, tokens, wte, wpe, T_, C,
                                                                                    n / 8);
    else
      embedding_forward_bf16_kernel<1><<<grid(n), kThreads, 0, ctx_.compute>>>(out, tokens, wte, wpe, T_, C, n);
    ZT_CUDA_CHECK_LAUNCH("embedding_forward_bf16_kernel");
  }

  void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T_,
                          int C) override {
    const int rows = B * T_;
    if (rows == 0 || C == 0) return;
    const bool vec = vec8_ok(size_t(C), {dwte, dwpe, dout});
    if (dwpe) {  // null: no learned positions
      const size_t n = size_t(T_) * C;
      if (vec)
        embedding_backward_wpe_bf16_kernel<8><<<grid(n / 8), kThreads, 0, ctx_.compute>>>(dwpe, dout, B, T_, C);
      else
        embedding_backward_wpe_bf16_kernel<1><<<grid(n), kThreads, 0, ctx_.compute>>>(dwpe, dout, B, T_, C);
      ZT_CUDA_CHECK_LAUNCH("embedding_backward_wpe_bf16_kernel");
    }
    auto* links = static_cast<int*>(ctx_.scratch(2 * sizeof(int) * size_t(rows)));
    int* head = links;
    int* next = links + rows;
    embedding_token_links_bf16_kernel<<<div_up(size_t(rows), kThreads), kThreads, 0, ctx_.compute>>>(head, next,
                                                                                                     tokens, rows);
    ZT_CUDA_CHECK_LAUNCH("embedding_token_links_bf16_kernel");
    if (vec) {
      const dim3 blocks(unsigned(rows), div_up(size_t(C) / 8, kThreads));
      embedding_backward_wte_bf16_kernel<8><<<blocks, kThreads, 0, ctx_.compute>>>(dwte, dout, tokens, head, next, C);
    } else {
      const dim3 blocks(unsigned(rows), div_up(size_t(C), kThreads));
      embedding_backward_wte_bf16_kernel<1><<<blocks, kThreads, 0, ctx_.compute>>>(dwte, dout, tokens, head, next, C);
    }
    ZT_CUDA_CHECK_LAUNCH("embedding_backward_wte_bf16_kernel");
  }

  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* x, const bf16* weight, const bf16* bias,
                         int rows, int C, double eps) override {
    if (rows == 0) return;
    if (vec8_ok(size_t(C), {out, x, weight, bias}))
      layernorm_forward_bf16_kernel<8><<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(out, mean, rstd, x, weight,
                                                                                        bias, rows, C, float(eps));
    else
      layernorm_forward_bf16_kernel<1><<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(out, mean, rstd, x, weight,
                                                                                        bias, rows, C, float(eps));
    ZT_CUDA_CHECK_LAUNCH("layernorm_forward_bf16_kernel");
  }

  void layernorm_backward(bf16* dx, float* dweight, float* dbias, const bf16* dout, const bf16* x, const bf16* weight,
                          const float* mean, const float* rstd, int rows, int C) override {
    if (rows == 0) return;
    const bool vec = vec8_ok(size_t(C), {dx, dout, x, weight});
    if (vec)
      layernorm_backward_dx_bf16_kernel<8><<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(dx, dout, x, weight, mean,
                                                                                            rstd, rows, C);
    else
      layernorm_backward_dx_bf16_kernel<1><<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(dx, dout, x, weight, mean,
                                                                                            rstd, rows, C);
    ZT_CUDA_CHECK_LAUNCH("layernorm_backward_dx_bf16_kernel");
    const LayernormParamTermsBf16 terms{dout, x, mean, rstd, C};
    if (vec) add_column_sums8(ctx_, dweight, dbias, rows, C, terms);
    else add_column_sums(ctx_, dweight, dbias, rows, C, terms);
  }

  void matmul_forward(bf16* out, const bf16* x, const bf16* weight, const bf16* bias, int rows, int in_dim,
                      int out_dim) override {
    gemm_plus_bias(forward_args(out, x, weight, rows, in_dim, out_dim, false), bias);
  }

  void matmul_backward(bf16* dx, float* dweight, float* dbias, const bf16* dout, const bf16* x, const bf16* weight,
                       int rows, int in_dim, int out_dim) override {
    if (dx) {  // dx[rows,in] = dout[rows,out] @ weight[in,out]^T, bf16
      GemmArgs args = bf16_gemm(DType::kBF16);
      args.trans_b = true;
      args.m = rows, args.n = in_dim, args.k = out_dim;
      args.a = dout, args.b = weight, args.d = dx;
      gemm(ctx_, args);
    }
    {  // dweight[in,out] += x[rows,in]^T @ dout[rows,out], fp32
      GemmArgs args = bf16_gemm(DType::kF32);
      args.trans_a = true;
      args.m = in_dim, args.n = out_dim, args.k = rows;
      args.a = x, args.b = dout, args.d = dweight;
      args.accumulate = true;
      gemm(ctx_, args);
    }
    if (dbias) add_bf16_column_sums(ctx_, dbias, dout, rows, out_dim);
  }

  // A GEMM with its neighbour (kernel_ops.h), as cuBLASLt's epilogues: the residual is the GEMM's
  // addend C (out = x W + bias + residual, rounded once), GELU_AUX_BIAS writes gelu(P) and keeps
  // P = x W + bias for the backward, DGELU multiplies dx's product by gelu'(P) before rounding.
  // So these round once where the ops they replace round twice (the GELU reads P unrounded):
  // within a bf16 ulp of the composed ops, which the GPU tests hold them to. Where cuBLASLt has
  // no algorithm (try_gemm) or the bias is not 16-byte aligned: the composed ops.
  void matmul_forward_residual(bf16* out, const bf16* x, const bf16* weight, const bf16* bias, const bf16* residual,
                               int rows, int in_dim, int out_dim) override {
    GemmArgs args = forward_args(out, x, weight, rows, in_dim, out_dim, false);
    args.c = residual, args.bias = bias;
    if (fusable(args) && try_gemm(ctx_, args)) return;
    KernelOps<bf16>::matmul_forward_residual(out, x, weight, bias, residual, rows, in_dim, out_dim);
  }

  void linear_forward_residual(bf16* out, const bf16* x, const bf16* weight, const bf16* bias, const bf16* residual,
                               int rows, int in_dim, int out_dim) override {
    GemmArgs args = forward_args(out, x, weight, rows, in_dim, out_dim, true);
    args.c = residual, args.bias = bias;
    if (fusable(args) && try_gemm(ctx_, args)) return;
    KernelOps<bf16>::linear_forward_residual(out, x, weight, bias, residual, rows, in_dim, out_dim);
  }

  void matmul_gelu_forward(bf16* pre, bf16* out, const bf16* x, const bf16* weight, const bf16* bias, int rows,
                           int in_dim, int out_dim) override {
    GemmArgs args = forward_args(out, x, weight, rows, in_dim, out_dim, false);
    args.bias = bias, args.epilogue = GemmEpilogue::kGeluAux, args.aux = pre;
    if (fusable(args) && try_gemm(ctx_, args)) return;
    KernelOps<bf16>::matmul_gelu_forward(pre, out, x, weight, bias, rows, in_dim, out_dim);
  }

  void matmul_backward_gelu(bf16* dx, float* dweight, float* dbias, const bf16* dout, const bf16* x,
                            const bf16* weight, const bf16* gelu_pre, int rows, int in_dim, int out_dim) override {
    GemmArgs args = bf16_gemm(DType::kBF16);  // d(gelu_pre) = gelu'(gelu_pre) * (dout @ weight^T)
    args.trans_b = true;
    args.m = rows, args.n = in_dim, args.k = out_dim;
    args.a = dout, args.b = weight, args.d = dx;
    args.epilogue = GemmEpilogue::kDGelu, args.aux = const_cast<bf16*>(gelu_pre);  // DGELU only reads it
    if (fusable(args) && try_gemm(ctx_, args)) {
      matmul_backward(nullptr, dweight, dbias, dout, x, weight, rows, in_dim, out_dim);  // dweight, dbias
      return;
    }
    KernelOps<bf16>::matmul_backward_gelu(dx, dweight, dbias, dout, x, weight, gelu_pre, rows, in_dim, out_dim);
  }

  // Flash attention: att is lse[B,NH,Tq], and the backward recomputes the probabilities.
  bool attention_saves_lse() const override { return true; }

  void attention_forward(bf16* out, float* att, const bf16* qkv, int B, int T_, int C, int NH) override {
    launch_attention_forward_bf16(ctx_, out, att, qkv, B, T_, C, NH);
  }

  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv, const float* att, int B,
                          int T_, int C, int NH) override {
    launch_attention_backward_bf16(ctx_, dqkv, dout, out, qkv, att, B, T_, C, NH);
  }

  void gelu_forward(bf16* out, const bf16* x, size_t n) override {
    launch_elementwise<8>(Bf16GeluForward{out, x}, n, all_aligned16({out, x}), ctx_.compute, ctx_.sm_count,
                          "gelu_forward_bf16_kernel");
  }

  void gelu_backward(bf16* dx, const bf16* x, const bf16* dout, size_t n) override {
    launch_elementwise<8>(Bf16GeluBackward{dx, x, dout}, n, all_aligned16({dx, x, dout}), ctx_.compute,
                          ctx_.sm_count, "gelu_backward_bf16_kernel");
  }

  void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) override {
    launch_elementwise<8>(Bf16Add{out, a, b}, n, all_aligned16({out, a, b}), ctx_.compute, ctx_.sm_count,
                          "residual_forward_bf16_kernel");
  }

  void accumulate(bf16* acc, const bf16* x, size_t n) override {
    launch_elementwise<8>(Bf16Add{acc, acc, x}, n, all_aligned16({acc, x}), ctx_.compute, ctx_.sm_count,
                          "accumulate_bf16_kernel");
  }

  void softmax_xent_forward(bf16* logits_to_probs, float* losses, const int32_t* targets, int rows, int V,
                            double* loss_sum, double weight) override {
    softmax_xent_forward_strided(logits_to_probs, losses, targets, rows, V, V, loss_sum, weight);
  }

  void softmax_xent_backward(bf16* probs_to_dlogits, const int32_t* targets, int rows, int V, double dloss) override {
    softmax_xent_backward_strided(probs_to_dlogits, targets, rows, V, V, V, dloss);
  }

  // The classifier over padded logits rows (padded_logits_stride): each row is `stride` columns
  // and the lm_head's GEMMs run over all of them, with the head padded by zero rows in scratch
  // (padded_classifier_scratch_bytes), so that no GEMM dimension is an odd V. The forward's GEMM
  // writes the padding columns (x . 0 = 0); the softmax never reads them; the backward sets them to
  // +0 before its GEMMs read them as dlogits, so they add nothing to dx. dhead has V rows, not
  // stride: its GEMM writes the rows below the last multiple of 64 in place and the last 64-row
  // tile into scratch, whose first V % 64 rows are then added.
  int logits_stride(int V) const override { return padded_logits_stride(V); }

  void classifier_forward(bf16* logits, float* losses, const bf16* x, const bf16* head, const int32_t* targets,
                          int rows, int C, int V, double* loss_sum, double weight) override {
    classifier_logits(logits, x, padded_head(head, V, C), rows, C, V);
    softmax_xent_forward_strided(logits, losses, targets, rows, V, logits_stride(V), loss_sum, weight);
  }

  void classifier_backward(bf16* dx, float* dhead, bf16* logits, const bf16* x, const bf16* head,
                           const int32_t* targets, int rows, int C, int V, double dloss) override {
    const int stride = logits_stride(V);
    // probabilities -> dlogits, the padding columns -> 0
    softmax_xent_backward_strided(logits, targets, rows, V, stride, stride, dloss);
    classifier_gemms_backward(dx, dhead, logits, x, padded_head(head, V, C), rows, C, V);
  }

  // The softmax writes dlogits in its last pass: the probabilities are never stored.
  void classifier_forward_backward(bf16* dx, float* dhead, bf16* logits, float* losses, const bf16* x,
                                   const bf16* head, const int32_t* targets, int rows, int C, int V, double* loss_sum,
                                   double weight, double dloss) override {
    const int stride = logits_stride(V);
    const bf16* padded = padded_head(head, V, C);  // one copy for both GEMMs that read it
    classifier_logits(logits, x, padded, rows, C, V);
    softmax_xent_forward_strided(logits, losses, targets, rows, V, stride, loss_sum, weight, dloss);
    classifier_gemms_backward(dx, dhead, logits, x, padded, rows, C, V);
  }

  void linear_forward(bf16* out, const bf16* x, const bf16* weight, const bf16* bias, int rows, int in_dim,
                      int out_dim) override {
    gemm_plus_bias(forward_args(out, x, weight, rows, in_dim, out_dim, true), bias);
  }

  void linear_backward(bf16* dx, float* dweight, float* dbias, const bf16* dout, const bf16* x, const bf16* weight,
                       int rows, int in_dim, int out_dim, bool accumulate_dx) override {
    if (dx) {  // dx[rows,in] (+)= dout[rows,out] @ weight[out,in]: beta = 1 reads dx as bf16, rounds once
      GemmArgs args = bf16_gemm(DType::kBF16);
      args.m = rows, args.n = in_dim, args.k = out_dim;
      args.a = dout, args.b = weight, args.d = dx;
      args.accumulate = accumulate_dx;
      gemm(ctx_, args);
    }
    {  // dweight[out,in] += dout[rows,out]^T @ x[rows,in], fp32
      GemmArgs args = bf16_gemm(DType::kF32);
      args.trans_a = true;
      args.m = out_dim, args.n = in_dim, args.k = rows;
      args.a = dout, args.b = x, args.d = dweight;
      args.accumulate = true;
      gemm(ctx_, args);
    }
    if (dbias) add_bf16_column_sums(ctx_, dbias, dout, rows, out_dim);
  }

  void rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* weight, int rows, int C,
                       double eps) override {
    launch_rmsnorm_forward_bf16(ctx_, out, rstd, x, weight, rows, C, eps);
  }

  void rmsnorm_backward(bf16* dx, float* dweight, const bf16* dout, const bf16* x, const bf16* weight,
                        const float* rstd, int rows, int C) override {
    launch_rmsnorm_backward_bf16(ctx_, dx, dweight, dout, x, weight, rstd, rows, C);
  }

  void rotary(bf16* x, const float* cos, const float* sin, int B, int T_, int heads, int hs, bool inverse) override {
    launch_rotary_bf16(ctx_, x, cos, sin, B, T_, heads, hs, inverse);
  }

  void gqa_attention_forward(bf16* out, float* att, const bf16* q, const bf16* k, const bf16* v, int B, int Tq,
                             int Tk, int NH, int NKV, int hs) override {
    launch_gqa_attention_forward_bf16(ctx_, out, att, q, k, v, B, Tq, Tk, NH, NKV, hs);
  }

  void gqa_attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* out, const bf16* q,
                              const bf16* k,
                              const bf16* v, const float* att, int B, int T_, int NH, int NKV, int hs) override {
    launch_gqa_attention_backward_bf16(ctx_, dq, dk, dv, dout, out, q, k, v, att, B, T_, NH, NKV, hs);
  }

  void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, size_t n) override {
    launch_swiglu_forward_bf16(ctx_, out, gate, up, n);
  }

  void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                       size_t n) override {
    launch_swiglu_backward_bf16(ctx_, dgate, dup, dout, gate, up, n);
  }

 private:
  /// A GEMM with bf16 A and B (fp32 accumulation) writing `d_dtype`.
  static GemmArgs bf16_gemm(DType d_dtype) {
    GemmArgs args;
    args.ab_dtype = DType::kBF16;
    args.d_dtype = d_dtype;
    return args;
  }

  /// out[rows,out_dim] = x[rows,in_dim] @ weight, bf16: weight [in,out] (GPT-2's Conv1D) or, when
  /// `linear`, nn.Linear's [out,in] transposed. No bias: the caller adds it, or an epilogue.
  static GemmArgs forward_args(bf16* out, const bf16* x, const bf16* weight, int rows, int in_dim, int out_dim,
                               bool linear) {
    GemmArgs args = bf16_gemm(DType::kBF16);
    args.trans_b = linear;
    args.m = rows, args.n = out_dim, args.k = in_dim;
    args.a = x, args.b = weight, args.d = out;
    return args;
  }

  /// Whether a fused GEMM may be tried: a non-empty sum (cuBLASLt rejects k = 0) and a bias, if
  /// any, 16-byte aligned for the epilogue (gemm_plus_bias broadcasts a less aligned one instead).
  static bool fusable(const GemmArgs& args) {
    return args.k > 0 && (args.bias == nullptr || is_aligned(args.bias, 16));
  }

  /// gemm(args) plus the bf16 bias[n] on every row of D (bias may be null), rounded once with the
  /// products. cuBLASLt's epilogue needs a 16-byte aligned bias; any other is broadcast into D
  /// first and the GEMM accumulates onto it (beta = 1 reads the exact bf16 bias back).
  void gemm_plus_bias(GemmArgs args, const bf16* bias) {
    if (bias && !is_aligned(bias, 16)) {
      const size_t n = size_t(args.m) * args.n;
      if (n == 0) return;
      broadcast_rows_bf16_kernel<<<grid(n), kThreads, 0, ctx_.compute>>>(static_cast<bf16*>(args.d), bias, args.m,
                                                                         args.n);
      ZT_CUDA_CHECK_LAUNCH("broadcast_rows_bf16_kernel");
      args.accumulate = true;
    } else {
      args.bias = bias;
    }
    gemm(ctx_, args);
  }

  /// logits[rows,stride] = x[rows,C] @ head[stride,C]^T, bf16; `padded` is padded_head's.
  void classifier_logits(bf16* logits, const bf16* x, const bf16* padded, int rows, int C, int V) {
    GemmArgs args = bf16_gemm(DType::kBF16);
    args.trans_b = true;
    args.m = rows, args.n = logits_stride(V), args.k = C;
    args.a = x, args.b = padded, args.d = logits;
    gemm(ctx_, args);
  }

  /// The lm_head's backward GEMMs from dlogits[rows,stride] (padding columns 0): dx (overwritten;
  /// skipped when null) and dhead += dlogits^T x. `padded` is padded_head's, still in scratch.
  void classifier_gemms_backward(bf16* dx, float* dhead, const bf16* dlogits, const bf16* x, const bf16* padded,
                                 int rows, int C, int V) {
    const int stride = logits_stride(V);
    if (dx) {  // dx[rows,C] = dlogits[rows,stride] @ head[stride,C], bf16
      GemmArgs args = bf16_gemm(DType::kBF16);
      args.m = rows, args.n = C, args.k = stride;
      args.a = dlogits, args.b = padded, args.d = dx;
      gemm(ctx_, args);
    }
    // dhead[V,C] += dlogits[rows,V]^T @ x[rows,C], fp32: rows [0, V64) in place ...
    const int V64 = stride == V ? V : V / 64 * 64;
    GemmArgs args = bf16_gemm(DType::kF32);
    args.trans_a = true;
    args.m = V64, args.n = C, args.k = rows;
    args.a = dlogits, args.b = x, args.d = dhead;
    args.lda = stride;
    args.accumulate = true;
    gemm(ctx_, args);
    if (V64 == V || rows == 0 || C == 0) return;
    // ... and the last tile, rows [V64, stride) of which the first V - V64 are dhead's, in scratch.
    float* tile = padded_head_tile(V, C);
    args.m = stride - V64;
    args.a = dlogits + V64, args.d = tile;
    args.accumulate = false;
    gemm(ctx_, args);
    const size_t n = size_t(V - V64) * C;
    add_f32_kernel<<<grid(n), kThreads, 0, ctx_.compute>>>(dhead + size_t(V64) * C, tile, n);
    ZT_CUDA_CHECK_LAUNCH("add_f32_kernel");
  }

  /// softmax_xent_forward over rows `stride` elements apart (V columns each). With `dloss`
  /// (classifier_forward_backward) the last pass writes the loss's gradient instead of the
  /// probabilities and zeroes each row's padding up to the stride.
  void softmax_xent_forward_strided(bf16* logits_to_probs, float* losses, const int32_t* targets, int rows, int V,
                                    int stride, double* loss_sum, double weight,
                                    std::optional<double> dloss = std::nullopt) {
    if (rows == 0) return;
    if (dloss) {
      softmax_xent_forward_bf16_kernel<true><<<unsigned(rows), 512, 0, ctx_.compute>>>(
          logits_to_probs, losses, targets, V, size_t(stride), stride, float(*dloss));
      ZT_CUDA_CHECK_LAUNCH("softmax_xent_forward_bf16_kernel<grad>");
    } else {
      softmax_xent_forward_bf16_kernel<false><<<unsigned(rows), 512, 0, ctx_.compute>>>(
          logits_to_probs, losses, targets, V, size_t(stride), V, 0.0f);
      ZT_CUDA_CHECK_LAUNCH("softmax_xent_forward_bf16_kernel");
    }
    add_loss_sum_bf16_kernel<<<1, 256, 0, ctx_.compute>>>(loss_sum, losses, rows, weight);
    ZT_CUDA_CHECK_LAUNCH("add_loss_sum_bf16_kernel");
  }

  /// softmax_xent_backward over rows `stride` elements apart, columns V..zero_to-1 set to 0.
  void softmax_xent_backward_strided(bf16* probs_to_dlogits, const int32_t* targets, int rows, int V, int stride,
                                     int zero_to, double dloss) {
    if (rows == 0 || zero_to == 0) return;
    softmax_xent_backward_bf16_kernel<<<unsigned(rows), kThreads, 0, ctx_.compute>>>(
        probs_to_dlogits, targets, V, size_t(stride), zero_to, float(dloss));
    ZT_CUDA_CHECK_LAUNCH("softmax_xent_backward_bf16_kernel");
  }

  /// head[V,C] followed by zero rows up to padded_logits_stride(V), in the backend's scratch (the
  /// head itself when V needs no padding). Copied once per classifier op (the scratch may serve
  /// other ops between two): 2 bytes a weight, next to GEMMs over every token of the chunk.
  const bf16* padded_head(const bf16* head, int V, int C) {
    const int stride = padded_logits_stride(V);
    if (stride == V) return head;
    auto* padded = static_cast<bf16*>(ctx_.scratch(padded_classifier_scratch_bytes(V, C)));
    const size_t bytes = size_t(V) * C * sizeof(bf16), pad_bytes = size_t(stride - V) * C * sizeof(bf16);
    ZT_CUDA_CHECK(cudaMemcpyAsync(padded, head, bytes, cudaMemcpyDeviceToDevice, ctx_.compute));
    ZT_CUDA_CHECK(cudaMemsetAsync(padded + size_t(V) * C, 0, pad_bytes, ctx_.compute));
    return padded;
  }

  /// The fp32 [64,C] tile after the padded head in the same scratch (the layout of
  /// padded_classifier_scratch_bytes).
  float* padded_head_tile(int V, int C) {
    const size_t total = padded_classifier_scratch_bytes(V, C);
    char* base = static_cast<char*>(ctx_.scratch(total));
    return reinterpret_cast<float*>(base + total - 64 * size_t(C) * sizeof(float));
  }

  unsigned grid(size_t n) const { return grid_for(n, kThreads, ctx_.sm_count); }
  /// Blocks for one warp per row.
  static unsigned row_blocks(int rows) { return div_up(size_t(rows), kThreads / kWarp); }

  CudaContext& ctx_;
};

}  // namespace

std::unique_ptr<KernelOps<bf16>> make_cuda_kernels_bf16(CudaContext& ctx) {
  return std::make_unique<CudaKernelsBf16>(ctx);
}

}  // namespace zt::cuda
