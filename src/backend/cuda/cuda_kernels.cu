// KernelOps<float> on the device: the CPU kernels' semantics (cpu_kernels.inc) op for op, on
// ctx.compute, never synchronising the host. Matmuls go through cuBLASLt (cublaslt_gemm.h), fp32
// with TF32 off unless set_allow_tf32 (--tf32); attention is in cuda_attention.cu, the Llama
// family's kernels (RMSNorm, rotary, grouped-query attention, SwiGLU) in cuda_llama_ops.cu.
//
// Sums that cross rows (bias, layernorm parameter and embedding gradients) are computed per column
// in a fixed order rather than with atomics (cuda_column_sums.cuh), so a run repeats bit for bit
// on the same GPU. Where it costs nothing the order is also the CPU's (embedding gradients add
// rows in ascending order).
#include <cmath>
#include <memory>

#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_invariant_gemm.h"
#include "backend/cuda/cuda_kernel_utils.cuh"
#include "backend/cuda/cuda_llama_ops.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

// ---- embedding ----------------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                         int T, int C, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t bt = i / C;
    const int c = int(i % C), t = int(bt % T);
    const float w = wte[size_t(tokens[bt]) * C + c];
    // Without positions the row is copied, not added to 0 (which would turn -0 into +0, as the CPU's
    // copy does not).
    out[i] = wpe ? w + wpe[size_t(t) * C + c] : w;
  }
}

// dwpe[t,c] += dout[b,t,c] for b = 0, 1, ...: one thread per (t, c), so no two threads meet.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t n = size_t(T) * C, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[size_t(b) * n + i];
    dwpe[i] = acc;
  }
}

// Links the rows that share a token: head[r] is 1 when no earlier row has r's token, next[r] is
// the next row with the same token (-1 at the end). Every thread scans all tokens, staged through
// shared memory: O((BT)^2) comparisons, which is cheap next to the gradient traffic.
__global__ void embedding_token_links_kernel(int* head, int* next, const int32_t* tokens, int rows) {
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

// dwte[token] += dout[r] for the rows r of each token in ascending order (the CPU's order): the
// block of a token's first row walks the token's chain; the other rows' blocks do nothing.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                              const int* head, const int* next, int C) {
  const int first = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (!head[first] || c >= C) return;
  float* w = dwte + size_t(tokens[first]) * C + c;
  float acc = *w;
  for (int r = first; r >= 0; r = next[r]) acc += dout[size_t(r) * C + c];
  *w = acc;
}

// ---- column-sum terms (cuda_column_sums.cuh) ---------------------------------------------------

struct MatrixTerms {  // (m[r, c], 0): plain column sums
  const float* m;
  int cols;
  __device__ float2 operator()(int r, int c) const { return make_float2(m[size_t(r) * cols + c], 0.0f); }
};

struct LayernormParamTerms {  // (norm * dout, dout): the weight's and the bias's gradient terms
  const float* dout;
  const float* x;
  const float* mean;
  const float* rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const size_t i = size_t(r) * C + c;
    const float d = dout[i];
    return make_float2((x[i] - mean[r]) * rstd[r] * d, d);
  }
};

// ---- layernorm: one warp per row --------------------------------------------------------------

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                         const float* bias, int rows, int C, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* xr = x + size_t(r) * C;
  float sum = 0;
  for (int c = lane; c < C; c += kWarp) sum += xr[c];
  const float m = warp_sum(sum) / float(C);
  float var = 0;
  for (int c = lane; c < C; c += kWarp) var += (xr[c] - m) * (xr[c] - m);
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
  float* o = out + size_t(r) * C;
  for (int c = lane; c < C; c += kWarp) o[c] = (xr[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx += (w d - mean(w d) - norm mean(w d norm)) rstd, per row.
__global__ void layernorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                             const float* mean, const float* rstd, int rows, int C) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* d = dout + size_t(r) * C;
  const float* xr = x + size_t(r) * C;
  const float m = mean[r], s = rstd[r];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane; c < C; c += kWarp) {
    const float dnorm = weight[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * (xr[c] - m) * s;
  }
  dnorm_mean = warp_sum(dnorm_mean) / float(C);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / float(C);
  float* dxr = dx + size_t(r) * C;
  for (int c = lane; c < C; c += kWarp) {
    const float norm = (xr[c] - m) * s;
    dxr[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// ---- elementwise ------------------------------------------------------------------------------
// GELU with the tanh approximation written as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
// exactly as the CPU writes it (no tanh, no cancellation).

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

struct GeluForwardOp {
  float* out;
  const float* x;
  __device__ void apply(size_t i) const { out[i] = gelu(x[i]); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float v[N];
    load_vec<N>(x + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = gelu(v[j]);
    store_vec<N>(out + i, v);
  }
};

struct GeluBackwardOp {
  float* dx;
  const float* x;
  const float* dout;
  __device__ void apply(size_t i) const { dx[i] = gelu_grad(x[i], dout[i]); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float v[N], d[N];
    load_vec<N>(x + i, v);
    load_vec<N>(dout + i, d);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = gelu_grad(v[j], d[j]);
    store_vec<N>(dx + i, v);
  }
};

struct AddOp {  // out = a + b (out may be a: accumulate)
  float* out;
  const float* a;
  const float* b;
  __device__ void apply(size_t i) const { out[i] = a[i] + b[i]; }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float u[N], v[N];
    load_vec<N>(a + i, u);
    load_vec<N>(b + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) u[j] += v[j];
    store_vec<N>(out + i, u);
  }
};

// out[r, c] = bias[c]: the bias for a GEMM that then accumulates, when cuBLASLt's epilogue cannot
// read the bias (not 16-byte aligned).
__global__ void broadcast_rows_kernel(float* out, const float* bias, int rows, int cols) {
  const size_t n = size_t(rows) * cols, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = bias[i % cols];
}

// ---- softmax cross-entropy --------------------------------------------------------------------

// One block per row: max, exponentials and their sum, normalisation; the row's loss from the
// target logit read before the row is overwritten.
__global__ void softmax_xent_forward_kernel(float* logits, float* losses, const int32_t* targets, int V) {
  __shared__ float shared_f[kWarp];
  const int r = blockIdx.x;
  float* l = logits + size_t(r) * V;
  const int target = targets[r];
  const float target_logit = target >= 0 ? l[target] : 0.0f;  // read before any thread writes l
  float maxval = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxval = fmaxf(maxval, l[v]);
  maxval = block_max(maxval, shared_f);  // its barriers also order the reads above before the writes below
  float sum = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float e = expf(l[v] - maxval);
    l[v] = e;
    sum += e;
  }
  sum = block_sum(sum, shared_f);
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) l[v] *= inv;
  // -log softmax[target] = log(sum exp(l - max)) + max - l[target]
  if (threadIdx.x == 0) losses[r] = target >= 0 ? logf(sum) + maxval - target_logit : 0.0f;
}

// *loss_sum += weight * (sum of the losses in double), by one block in a fixed order.
__global__ void add_loss_sum_kernel(double* loss_sum, const float* losses, int rows, double weight) {
  __shared__ double shared_d[kWarp];
  double acc = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) acc += double(losses[r]);
  acc = block_sum(acc, shared_d);
  if (threadIdx.x == 0) *loss_sum += weight * acc;
}

// (p - onehot(target)) d, with the CPU's two roundings (p d, then - d) kept apart from an FMA.
__global__ void softmax_xent_backward_kernel(float* probs, const int32_t* targets, int V, size_t n, float d) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int target = targets[i / V];
    if (target < 0) {
      probs[i] = 0.0f;
      continue;
    }
    float g = __fmul_rn(probs[i], d);
    if (int(i % V) == target) g = __fsub_rn(g, d);
    probs[i] = g;
  }
}

// ---- the op table -----------------------------------------------------------------------------

class CudaKernels final : public KernelOps<float> {
 public:
  explicit CudaKernels(CudaContext& ctx) : ctx_(ctx) {}

  // Every device this build runs on is sm_80 or newer (CMAKE_CUDA_ARCHITECTURES): TF32 is there.
  bool set_allow_tf32(bool allow) override {
    tf32_ = allow;
    return true;
  }

  bool set_batch_invariant(bool on) override {
    invariant_ = on;
    return true;
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T_,
                         int C) override {
    const size_t n = size_t(B) * T_ * C;
    if (n == 0) return;
    embedding_forward_kernel<<<grid(n), kThreads, 0, ctx_.compute>>>(out, tokens, wte, wpe, T_, C, n);
    ZT_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
  }

  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T_,
                          int C) override {
    const int rows = B * T_;
    if (rows == 0 || C == 0) return;
    if (dwpe) {  // null: no learned positions
      embedding_backward_wpe_kernel<<<grid(size_t(T_) * C), kThreads, 0, ctx_.compute>>>(dwpe, dout, B, T_, C);
      ZT_CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
    }
    auto* links = static_cast<int*>(ctx_.scratch(2 * sizeof(int) * size_t(rows)));
    int* head = links;
    int* next = links + rows;
    embedding_token_links_kernel<<<div_up(size_t(rows), kThreads), kThreads, 0, ctx_.compute>>>(head, next, tokens,
                                                                                                rows);
    ZT_CUDA_CHECK_LAUNCH("embedding_token_links_kernel");
    const dim3 blocks(unsigned(rows), div_up(size_t(C), kThreads));
    embedding_backward_wte_kernel<<<blocks, kThreads, 0, ctx_.compute>>>(dwte, dout, tokens, head, next, C);
    ZT_CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                         const float* bias, int rows, int C, double eps) override {
    if (rows == 0) return;
    layernorm_forward_kernel<<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(out, mean, rstd, x, weight, bias,
                                                                              rows, C, float(eps));
    ZT_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
  }

  void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                          const float* weight, const float* mean, const float* rstd, int rows, int C) override {
    if (rows == 0) return;
    layernorm_backward_dx_kernel<<<row_blocks(rows), kThreads, 0, ctx_.compute>>>(dx, dout, x, weight, mean, rstd,
                                                                                  rows, C);
    ZT_CUDA_CHECK_LAUNCH("layernorm_backward_dx_kernel");
    add_column_sums(ctx_, dweight, dbias, rows, C, LayernormParamTerms{dout, x, mean, rstd, C});
  }

  void matmul_forward(float* out, const float* x, const float* weight, const float* bias, int rows, int in_dim,
                      int out_dim) override {
    if (invariant_) return launch_invariant_gemm_nn(ctx_, out, x, weight, bias, rows, out_dim, in_dim);
    GemmArgs args;  // out[rows,out] = x[rows,in] @ weight[in,out] + bias
    args.allow_tf32 = tf32_;
    args.m = rows, args.n = out_dim, args.k = in_dim;
    args.a = x, args.b = weight, args.d = out;
    gemm_plus_bias(args, bias);
  }

  void matmul_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                       const float* weight, int rows, int in_dim, int out_dim) override {
    if (dx) {  // dx[rows,in] = dout[rows,out] @ weight[in,out]^T
      GemmArgs args;
      args.allow_tf32 = tf32_;
      args.trans_b = true;
      args.m = rows, args.n = in_dim, args.k = out_dim;
      args.a = dout, args.b = weight, args.d = dx;
      gemm(ctx_, args);
    }
    {  // dweight[in,out] += x[rows,in]^T @ dout[rows,out]
      GemmArgs args;
      args.allow_tf32 = tf32_;
      args.trans_a = true;
      args.m = in_dim, args.n = out_dim, args.k = rows;
      args.a = x, args.b = dout, args.d = dweight;
      args.accumulate = true;
      gemm(ctx_, args);
    }
    if (dbias) add_column_sums(ctx_, dbias, nullptr, rows, out_dim, MatrixTerms{dout, out_dim});
  }

  void attention_forward(float* out, float* att, const float* qkv, int B, int T_, int C, int NH) override {
    launch_attention_forward(ctx_, out, att, qkv, B, T_, C, NH);
  }

  // The probabilities are kept (att): the forward's out is not needed.
  void attention_backward(float* dqkv, const float* dout, const float*, const float* qkv, const float* att, int B,
                          int T_, int C, int NH) override {
    launch_attention_backward(ctx_, dqkv, dout, qkv, att, B, T_, C, NH);
  }

  void gelu_forward(float* out, const float* x, size_t n) override {
    launch_elementwise<4>(GeluForwardOp{out, x}, n, all_aligned16({out, x}), ctx_.compute, ctx_.sm_count,
                          "gelu_forward_kernel");
  }

  void gelu_backward(float* dx, const float* x, const float* dout, size_t n) override {
    launch_elementwise<4>(GeluBackwardOp{dx, x, dout}, n, all_aligned16({dx, x, dout}), ctx_.compute, ctx_.sm_count,
                          "gelu_backward_kernel");
  }

  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    launch_elementwise<4>(AddOp{out, a, b}, n, all_aligned16({out, a, b}), ctx_.compute, ctx_.sm_count,
                          "residual_forward_kernel");
  }

  void accumulate(float* acc, const float* x, size_t n) override {
    launch_elementwise<4>(AddOp{acc, acc, x}, n, all_aligned16({acc, x}), ctx_.compute, ctx_.sm_count,
                          "accumulate_kernel");
  }

  void softmax_xent_forward(float* logits_to_probs, float* losses, const int32_t* targets, int rows, int V,
                            double* loss_sum, double weight) override {
    if (rows == 0) return;
    softmax_xent_forward_kernel<<<unsigned(rows), 512, 0, ctx_.compute>>>(logits_to_probs, losses, targets, V);
    ZT_CUDA_CHECK_LAUNCH("softmax_xent_forward_kernel");
    add_loss_sum_kernel<<<1, 256, 0, ctx_.compute>>>(loss_sum, losses, rows, weight);
    ZT_CUDA_CHECK_LAUNCH("add_loss_sum_kernel");
  }

  void softmax_xent_backward(float* probs_to_dlogits, const int32_t* targets, int rows, int V,
                             double dloss) override {
    const size_t n = size_t(rows) * V;
    if (n == 0) return;
    softmax_xent_backward_kernel<<<grid(n), kThreads, 0, ctx_.compute>>>(probs_to_dlogits, targets, V, n,
                                                                         float(dloss));
    ZT_CUDA_CHECK_LAUNCH("softmax_xent_backward_kernel");
  }

  void linear_forward(float* out, const float* x, const float* weight, const float* bias, int rows, int in_dim,
                      int out_dim) override {
    if (invariant_) return launch_invariant_gemm_nt(ctx_, out, x, weight, bias, rows, out_dim, in_dim);
    GemmArgs args;  // out[rows,out] = x[rows,in] @ weight[out,in]^T + bias
    args.allow_tf32 = tf32_;
    args.trans_b = true;
    args.m = rows, args.n = out_dim, args.k = in_dim;
    args.a = x, args.b = weight, args.d = out;
    gemm_plus_bias(args, bias);
  }

  void linear_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x, const float* weight,
                       int rows, int in_dim, int out_dim, bool accumulate_dx) override {
    if (dx) {  // dx[rows,in] (+)= dout[rows,out] @ weight[out,in]: beta = 1 adds the q/k/v projections' parts
      GemmArgs args;
      args.allow_tf32 = tf32_;
      args.m = rows, args.n = in_dim, args.k = out_dim;
      args.a = dout, args.b = weight, args.d = dx;
      args.accumulate = accumulate_dx;
      gemm(ctx_, args);
    }
    {  // dweight[out,in] += dout[rows,out]^T @ x[rows,in]
      GemmArgs args;
      args.allow_tf32 = tf32_;
      args.trans_a = true;
      args.m = out_dim, args.n = in_dim, args.k = rows;
      args.a = dout, args.b = x, args.d = dweight;
      args.accumulate = true;
      gemm(ctx_, args);
    }
    if (dbias) add_column_sums(ctx_, dbias, nullptr, rows, out_dim, MatrixTerms{dout, out_dim});
  }

  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int rows, int C,
                       double eps) override {
    launch_rmsnorm_forward(ctx_, out, rstd, x, weight, rows, C, eps);
  }

  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int rows, int C) override {
    launch_rmsnorm_backward(ctx_, dx, dweight, dout, x, weight, rstd, rows, C);
  }

  void rotary(float* x, const float* cos, const float* sin, int B, int T_, int heads, int hs, bool inverse) override {
    launch_rotary(ctx_, x, cos, sin, B, T_, heads, hs, inverse);
  }

  void gqa_attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B, int Tq,
                             int Tk, int NH, int NKV, int hs) override {
    launch_gqa_attention_forward(ctx_, out, att, q, k, v, B, Tq, Tk, NH, NKV, hs);
  }

  void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float*, const float* q,
                              const float* k, const float* v, const float* att, int B, int T_, int NH, int NKV,
                              int hs) override {
    launch_gqa_attention_backward(ctx_, dq, dk, dv, dout, q, k, v, att, B, T_, NH, NKV, hs);
  }

  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    launch_swiglu_forward(ctx_, out, gate, up, n);
  }

  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    launch_swiglu_backward(ctx_, dgate, dup, dout, gate, up, n);
  }

 private:
  /// gemm(args) plus bias[n] on every row of D (bias may be null). cuBLASLt's epilogue needs a
  /// 16-byte aligned bias; any other is broadcast into D first and the GEMM accumulates onto it,
  /// which is also the CPU's order (bias first, then the products).
  void gemm_plus_bias(GemmArgs args, const float* bias) {
    if (bias && !is_aligned(bias, 16)) {
      const size_t n = size_t(args.m) * args.n;
      if (n == 0) return;
      broadcast_rows_kernel<<<grid(n), kThreads, 0, ctx_.compute>>>(static_cast<float*>(args.d), bias, args.m,
                                                                    args.n);
      ZT_CUDA_CHECK_LAUNCH("broadcast_rows_kernel");
      args.accumulate = true;
    } else {
      args.bias = bias;
    }
    gemm(ctx_, args);
  }

  unsigned grid(size_t n) const { return grid_for(n, kThreads, ctx_.sm_count); }
  /// Blocks for one warp per row.
  static unsigned row_blocks(int rows) { return div_up(size_t(rows), kThreads / kWarp); }

  CudaContext& ctx_;
  bool tf32_ = false;       // fp32 GEMMs on TF32 tensor cores (set_allow_tf32)
  bool invariant_ = false;  // fixed-order GEMMs for the decoder (set_batch_invariant)
};

}  // namespace

std::unique_ptr<KernelOps<float>> make_cuda_kernels(CudaContext& ctx) { return std::make_unique<CudaKernels>(ctx); }

}  // namespace zt::cuda
