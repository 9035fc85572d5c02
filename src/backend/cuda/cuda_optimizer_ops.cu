// OptimizerOps on the device: the fused Adam/AdamW, Lion and Adagrad steps, Lamb's, Muon's and
// Adafactor's passes, the sum of squares for gradient clipping, gradient accumulation between
// dtypes, and zero. All on ctx.compute; none synchronises the host.
// The arithmetic is the CPU's (cpu_kernels.inc) operation for operation.
#include <cmath>
#include <memory>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernel_utils.cuh"

namespace zt::cuda {
namespace {

// The step's scalars, derived once on the host exactly as the CPU derives them.
struct AdamScalars {
  float b1, b2, one_minus_b1, one_minus_b2;
  float step_size;     // -lr / bias_correction1
  float inv_sqrt_bc2;  // 1 / sqrt(bias_correction2)
  float l2;            // weight decay folded into the gradient (Adam mode)
  float decoupled;     // -lr * weight decay applied to the weight (AdamW mode)
  float scale, eps;
};

AdamScalars adam_scalars(const OptimizerStepArgs& a) {
  AdamScalars s;
  s.b1 = a.beta1;
  s.b2 = a.beta2;
  s.one_minus_b1 = 1 - a.beta1;
  s.one_minus_b2 = 1 - a.beta2;
  s.step_size = -a.lr / a.bias_correction1;
  s.inv_sqrt_bc2 = 1.0f / std::sqrt(a.bias_correction2);
  s.l2 = a.adamw_mode ? 0.0f : a.weight_decay;
  s.decoupled = a.adamw_mode ? -a.lr * a.weight_decay : 0.0f;
  s.scale = a.grad_scale;
  s.eps = a.eps;
  return s;
}

// One element: g = grad * scale + l2 w; m, v moments; w -= lr wd w (AdamW); w += step m / (sqrt(v)
// / sqrt(bc2) + eps). Returns the new master weight; m and v are updated through the references.
__device__ __forceinline__ float adam_update(const AdamScalars& s, float w, float grad, float& m, float& v) {
  const float g = grad * s.scale + s.l2 * w;
  m = s.b1 * m + s.one_minus_b1 * g;
  v = s.b2 * v + s.one_minus_b2 * g * g;
  w += s.decoupled * w;
  w += s.step_size * m / (sqrtf(v) * s.inv_sqrt_bc2 + s.eps);
  return w;
}

template <typename G, typename P>
struct AdamOp {
  AdamScalars s;
  float* master;
  float* exp_avg;
  float* exp_avg_sq;
  const G* grad;
  P* param;
  bool write_param;  // false when param is master itself

  __device__ void apply(size_t i) const {
    float m = exp_avg[i], v = exp_avg_sq[i];
    const float w = adam_update(s, master[i], load_float(grad, i), m, v);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    master[i] = w;
    if (write_param) store_float(param, i, w);
  }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float w[N], g[N], m[N], v[N];
    load_vec<N>(master + i, w);
    load_vec<N>(grad + i, g);
    load_vec<N>(exp_avg + i, m);
    load_vec<N>(exp_avg_sq + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = adam_update(s, w[j], g[j], m[j], v[j]);
    store_vec<N>(exp_avg + i, m);
    store_vec<N>(exp_avg_sq + i, v);
    store_vec<N>(master + i, w);
    if (write_param) store_vec<N>(param + i, w);
  }
};

// Lion and Adagrad over one moment: `update(w, g, m)` returns the new weight and updates m.
template <typename G, typename P, typename Rule>
struct OneMomentOp {
  Rule rule;
  float* master;
  float* moment;
  const G* grad;
  P* param;
  bool write_param;

  __device__ void apply(size_t i) const {
    float m = moment[i];
    const float w = rule(master[i], load_float(grad, i), m);
    moment[i] = m;
    master[i] = w;
    if (write_param) store_float(param, i, w);
  }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float w[N], g[N], m[N];
    load_vec<N>(master + i, w);
    load_vec<N>(grad + i, g);
    load_vec<N>(moment + i, m);
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = rule(w[j], g[j], m[j]);
    store_vec<N>(moment + i, m);
    store_vec<N>(master + i, w);
    if (write_param) store_vec<N>(param + i, w);
  }
};

// c = b1 m + (1 - b1) g ; w = w (1 - lr wd) - lr sign(c), sign(0) = 0 ; m = b2 m + (1 - b2) g.
struct LionRule {
  float b1, b2, one_minus_b1, one_minus_b2, lr, after_decay, scale;
  __device__ __forceinline__ float operator()(float w, float grad, float& m) const {
    const float g = grad * scale;
    const float c = b1 * m + one_minus_b1 * g;
    const float sign = float(c > 0.0f) - float(c < 0.0f);
    m = b2 * m + one_minus_b2 * g;
    return w * after_decay - lr * sign;
  }
};

// g = grad * scale + wd w ; s += g^2 ; w -= lr g / (sqrt(s) + eps). The fused multiply-adds are
// written out, as the CPU's kernel writes them (cpu_kernels.inc), so that an offloaded step is
// the device's to the bit: left to the compilers, nvcc fused wd w into the sum and GCC grad scale.
struct AdagradRule {
  float lr, wd, eps, scale;
  __device__ __forceinline__ float operator()(float w, float grad, float& s) const {
    const float g = fmaf(wd, w, grad * scale);
    s = fmaf(g, g, s);
    return w - lr * g / (sqrtf(s) + eps);
  }
};

template <typename A, typename X>
struct AccumulateOp {
  A* acc;
  const X* x;
  __device__ void apply(size_t i) const { store_float(acc, i, load_float(acc, i) + load_float(x, i)); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float a[N], b[N];
    load_vec<N>(acc + i, a);
    load_vec<N>(x + i, b);
#pragma unroll
    for (int j = 0; j < N; ++j) a[j] += b[j];
    store_vec<N>(acc + i, a);
  }
};

// Squares summed in double per thread, then per block into partials[blockIdx.x]; add_partials
// then adds the blocks' sums in block order. An atomicAdd per block would add them in whatever
// order the blocks finish, so that the same gradient gave norms a double's rounding apart from
// run to run: a step's norm is reproducible this way (the delayed update's test compares two).
template <typename T>
__global__ void sum_squares_kernel(const T* data, size_t n, double* partials) {
  __shared__ double shared[kWarp];
  double acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double x = load_float(data, i);
    acc += x * x;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// ZeRO++'s quantization (OptimizerOps::quantize): one thread block per quantization block,
// whose largest |x| a block reduction finds; the same float operations as the CPU's. 4 bits: each
// thread packs a pair of elements into one byte.
template <typename T>
__global__ void quantize_kernel(const T* x, size_t n, size_t block, int bits, uint8_t* q, float* scales) {
  __shared__ float shared[kWarp];
  const size_t lo = size_t(blockIdx.x) * block, hi = min(n, lo + block);
  float a = 0;
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) a = fmaxf(a, fabsf(load_float(x, i)));
  a = block_max(a, shared);
  const int h = bits == 8 ? 128 : 8;
  const float s = a > 0 ? float(h) / a : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = 1.0f / s;
  const auto level = [&](size_t i) { return min(h - 1, max(-h, __float2int_rn(load_float(x, i) * s))); };
  if (bits == 8) {
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) q[i] = uint8_t(int8_t(level(i)));
    return;
  }
  for (size_t i = lo + 2 * threadIdx.x; i < hi; i += 2 * size_t(blockDim.x)) {
    const int high = i + 1 < hi ? level(i + 1) : 0;
    q[i / 2] = uint8_t((level(i) & 15) | ((high & 15) << 4));
  }
}

template <typename T>
__global__ void dequantize_kernel(const uint8_t* q, const float* scales, size_t n, size_t block, int bits, T* x) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int v = bits == 8 ? int(int8_t(q[i])) : int(int8_t(uint8_t(q[i / 2] >> (4 * (i % 2))) << 4)) >> 4;
    store_float(x, i, float(v) * scales[i / block]);
  }
}

// *out += partials[0] + ... + partials[count - 1], in an order fixed by count: one block.
__global__ void add_partials_kernel(const double* partials, unsigned count, double* out) {
  __shared__ double shared[kWarp];
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out += acc;
}

// Lamb's scalars, derived on the host as the CPU derives them.
struct LambScalars {
  float b1, b2, one_minus_b1, one_minus_b2, wd, eps, scale;
  bool inside;  // eps under the square root
  __device__ __forceinline__ float update(float m, float v, float w) const {
    return m / (inside ? sqrtf(v + eps) : sqrtf(v) + eps) + wd * w;
  }
};

LambScalars lamb_scalars(const OptimizerStepArgs& a) {
  return {a.beta1, a.beta2, 1 - a.beta1, 1 - a.beta2, a.weight_decay, a.eps, a.grad_scale, a.eps_inside_sqrt};
}

// Lamb's first pass over one tensor: the moments, and sum(w^2), sum(u^2) in double per thread,
// per block, then one atomicAdd of each per block into sums[0], sums[1].
template <typename G>
__global__ void lamb_moments_kernel(LambScalars s, const float* master, float* m, float* v, const G* grad, size_t n,
                                    double* sums) {
  __shared__ double shared[kWarp];
  double w2 = 0, u2 = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = load_float(grad, i) * s.scale, w = master[i];
    const float mi = s.b1 * m[i] + s.one_minus_b1 * g;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float u = s.update(mi, vi, w);
    w2 += double(w) * w;
    u2 += double(u) * u;
  }
  w2 = block_sum(w2, shared);  // ends with a barrier: `shared` serves the second sum
  u2 = block_sum(u2, shared);
  if (threadIdx.x == 0) {
    atomicAdd(sums, w2);
    atomicAdd(sums + 1, u2);
  }
}

// Lamb's second pass: w -= step * u (step = lr sqrt(bc2) / bc1 x the tensor's trust ratio).
template <typename P>
struct LambApplyOp {
  LambScalars s;
  float step;  // negative
  float* master;
  const float* m;
  const float* v;
  P* param;
  bool write_param;

  __device__ void apply(size_t i) const {
    const float w = master[i] + step * s.update(m[i], v[i], master[i]);
    master[i] = w;
    if (write_param) store_float(param, i, w);
  }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float w[N], mm[N], vv[N];
    load_vec<N>(master + i, w);
    load_vec<N>(m + i, mm);
    load_vec<N>(v + i, vv);
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = w[j] + step * s.update(mm[j], vv[j], w[j]);
    store_vec<N>(master + i, w);
    if (write_param) store_vec<N>(param + i, w);
  }
};

// Muon's first pass: m = beta m + (1 - beta) g ; update = (1 - beta) g + beta m.
template <typename G>
struct MuonMomentumOp {
  float beta, one_minus, scale;
  float* m;
  const G* grad;
  float* update;

  __device__ void apply(size_t i) const {  // the CPU's fmas, so both round alike
    const float g = one_minus * (load_float(grad, i) * scale);
    const float mi = fmaf(beta, m[i], g);
    m[i] = mi;
    update[i] = fmaf(beta, mi, g);
  }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float g[N], mm[N], u[N];
    load_vec<N>(grad + i, g);
    load_vec<N>(m + i, mm);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float gj = one_minus * (g[j] * scale);
      mm[j] = fmaf(beta, mm[j], gj);
      u[j] = fmaf(beta, mm[j], gj);
    }
    store_vec<N>(m + i, mm);
    store_vec<N>(update + i, u);
  }
};

// Muon's second pass: w = w (1 - lr wd) - muon_lr update.
template <typename P>
struct MuonApplyOp {
  float after_decay, step;  // step negative
  float* master;
  const float* update;
  P* param;
  bool write_param;

  __device__ void apply(size_t i) const {
    const float w = fmaf(step, update[i], master[i] * after_decay);
    master[i] = w;
    if (write_param) store_float(param, i, w);
  }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float w[N], u[N];
    load_vec<N>(master + i, w);
    load_vec<N>(update + i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = fmaf(step, u[j], w[j] * after_decay);
    store_vec<N>(master + i, w);
    if (write_param) store_vec<N>(param + i, w);
  }
};

// 1-bit Adam. The worker's momentum (when there is a gradient) and sum((m + e)^2) over the
// padded tensor, in double per thread, per block, one atomicAdd per block.
template <typename G>
__global__ void onebit_momentum_sums_kernel(float b1, float one_minus_b1, float scale, float* m, const G* grad,
                                            size_t n, const float* error, size_t padded, double* sum) {
  __shared__ double shared[kWarp];
  double acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < padded; i += stride) {
    float x = 0;
    if (i < n) {
      x = m[i];
      if (grad) {
        x = fmaf(b1, x, one_minus_b1 * (load_float(grad, i) * scale));
        m[i] = x;
      }
    }
    if (error) x += error[i];
    acc += double(x) * x;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(sum, acc);
}

// The server's compensated chunk: every rank's sign times its scale / ranks, added in rank order.
__global__ void onebit_server_sums_kernel(SignBlocks in, float inv_ranks, float* error, double* sum) {
  __shared__ double shared[kWarp];
  double acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < in.chunk; j += stride) {
    float x = 0;
    for (size_t q = 0; q < in.blocks; ++q) {
      const float w = in.scales[q * in.scale_stride] * inv_ranks;
      x += (in.words[q * in.block_words + in.word0 + j / 32] >> (j % 32)) & 1u ? w : -w;
    }
    const float e = x + error[j];
    error[j] = e;
    acc += double(e) * e;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(sum, acc);
}

// One thread per 32-bit word of signs: it reads its 32 elements, writes their errors and the word.
__global__ void onebit_compress_kernel(const float* x, size_t n, float* error, size_t padded, const double* sum,
                                       SignBlocks out) {
  const float scale = float(sqrt(*sum) / sqrt(double(padded)));
  const size_t words_per_chunk = (out.chunk + 31) / 32, words = out.blocks * words_per_chunk;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < words; k += stride) {
    const size_t q = k / words_per_chunk, w = k % words_per_chunk;
    const size_t first = q * out.chunk + w * 32, last = min(q * out.chunk + out.chunk, first + 32);
    uint32_t word = 0;
    for (size_t i = first; i < last; ++i) {
      const float v = (x && i < n ? x[i] : 0.0f) + error[i];
      const bool positive = !(v < 0);  // 0, -0 and NaN count as +1
      error[i] = v - (positive ? scale : -scale);
      word |= uint32_t(positive) << (i - first);
    }
    out.words[q * out.block_words + out.word0 + w] = word;
    if (k < (out.scale_stride ? out.blocks : 1)) out.scales[k * out.scale_stride] = scale;  // one slot: one writer
  }
}

// The decompressed momentum (where there are signs) and the step with exp_avg_sq frozen.
template <typename P>
__global__ void onebit_apply_kernel(float step, float wd, float eps, float* master, float* m, const float* v,
                                    SignBlocks in, P* param, bool write_param, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float mi = m[i];
    if (in.words) {
      const size_t q = i / in.chunk, j = i % in.chunk;
      const float s = in.scales[q * in.scale_stride];
      mi = (in.words[q * in.block_words + in.word0 + j / 32] >> (j % 32)) & 1u ? s : -s;
    }
    if (v[i] == 0) mi = 0.0f;
    m[i] = mi;
    const float w = master[i];
    const float updated = w + step * (mi / (sqrtf(v[i]) + eps) + wd * w);
    master[i] = updated;
    if (write_param) store_float(param, i, updated);
  }
}

// 1-bit Lamb past its warm-up: the momentum (as onebit_momentum_sums_kernel's) times the
// tensor's scaling coefficient, into the packed buffer the all-reduce compresses.
template <typename G>
__global__ void onebit_lamb_momentum_kernel(float b1, float one_minus_b1, float grad_scale, float scale,
                                            const float* m, const G* grad, float* x, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = fmaf(b1, m[i], one_minus_b1 * (load_float(grad, i) * grad_scale)) * scale;
  }
}

__global__ void onebit_decompress_kernel(SignBlocks in, float* out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t q = i / in.chunk, j = i % in.chunk;
    const float s = in.scales[q * in.scale_stride];
    out[i] = (in.words[q * in.block_words + in.word0 + j / 32] >> (j % 32)) & 1u ? s : -s;
  }
}

// After the all-reduce (OptimizerOps::onebit_lamb_stats): sum(u^2) and sum(p^2) in double per
// thread, per block, one atomicAdd each per block; the ratio's maximum per block, then one
// atomicMax on the double's bits (for values >= 0 their order as integers is the numbers').
__global__ void onebit_lamb_stats_kernel(float b1, float b2, float one_minus_b1, float one_minus_b2, float wd,
                                         float eps, float scale, const float* master, float* m, const float* v,
                                         float* f, const float* x, size_t n, double* sums) {
  __shared__ double shared[kWarp];
  __shared__ float shared_max[kWarp];
  double u2 = 0, p2 = 0;
  float worst = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float mi = v[i] == 0 ? 0.0f : x[i] / scale;
    const float r = (mi - m[i] * b1) / one_minus_b1;
    const float fi = f[i] * b2 + one_minus_b2 * r * r;
    const float d = sqrtf(v[i]) + eps;
    const float p = mi / d;
    const float u = p + wd * master[i];
    m[i] = mi;
    f[i] = fi;
    u2 += double(u) * u;
    p2 += double(p) * p;
    worst = fmaxf(worst, d / (sqrtf(fi) + eps));
  }
  u2 = block_sum(u2, shared);
  p2 = block_sum(p2, shared);
  worst = block_max(worst, shared_max);
  if (threadIdx.x == 0) {
    atomicAdd(sums, u2);
    atomicAdd(sums + 1, p2);
    atomicMax(reinterpret_cast<unsigned long long*>(sums + 2),
              static_cast<unsigned long long>(__double_as_longlong(double(worst))));
  }
}

// 0/1 Adam's passes (OptimizerOps::zero_one_pass), one kernel per pass.
struct ZeroOneScalars {
  float b1, one_minus_b1, wd, eps, step, scale, lrs;
  bool fresh;
};
template <ZeroOnePass kPass, typename P, typename G>
__global__ void zero_one_kernel(ZeroOneScalars k, float* master, float* m, const float* v, float* u, const G* grad,
                                SignBlocks in, P* param, bool write_param, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const bool masked = v[i] == 0;
    const float d = sqrtf(v[i]) + k.eps;
    float decompressed = 0;
    if (in.words) {
      const size_t q = i / in.chunk, j = i % in.chunk;
      const float s = in.scales[q * in.scale_stride];
      decompressed = (in.words[q * in.block_words + in.word0 + j / 32] >> (j % 32)) & 1u ? s : -s;
    }
    float w = master[i];
    if constexpr (kPass == ZeroOnePass::kCompressedGrad) {
      const float g = in.words ? decompressed : load_float(grad, i) * k.scale;
      const float mi = m[i] * k.b1 + k.one_minus_b1 * (masked ? 0.0f : g);
      m[i] = mi;
      w = w + k.step * (mi / d + k.wd * w);
    } else if constexpr (kPass == ZeroOnePass::kLocal) {
      const float mi = masked ? 0.0f : m[i] * k.b1 + k.one_minus_b1 * (load_float(grad, i) * k.scale);
      m[i] = mi;
      const float moved = k.step * (mi / d + k.wd * w);
      w = w + moved;
      u[i] = (k.fresh ? 0.0f : u[i]) + moved;
    } else if constexpr (kPass == ZeroOnePass::kSyncPrepare) {
      w = w - u[i];
      u[i] = u[i] * d;
    } else {
      float met = decompressed;
      if (!in.words) {
        w = w - u[i];
        met = u[i] * d;
      }
      if (masked) met = 0.0f;
      m[i] = k.lrs > 0 ? -(met / k.lrs) : 0.0f;  // lrs 0: every lr since the meeting was 0
      w = w + met / d;
      u[i] = 0.0f;
    }
    master[i] = w;
    if (write_param) store_float(param, i, w);
  }
}

// y = a y + b x.
struct AxpbyOp {
  float a, b;
  float* y;
  const float* x;
  __device__ void apply(size_t i) const { y[i] = a * y[i] + b * x[i]; }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float yy[N], xx[N];
    load_vec<N>(y + i, yy);
    load_vec<N>(x + i, xx);
#pragma unroll
    for (int j = 0; j < N; ++j) yy[j] = a * yy[j] + b * xx[j];
    store_vec<N>(y + i, yy);
  }
};

// x *= 1 / (sqrt(*sum_sq) + eps): the norm is read on the device, so the host never waits.
__global__ void scale_by_inverse_norm_kernel(float* x, size_t n, const double* sum_sq, float eps) {
  const float s = float(1.0 / (sqrt(*sum_sq) + double(eps)));
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

__global__ void add_diagonal_kernel(float* x, size_t n, float a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    x[i * n + i] += a;
  }
}

// ---- Adafactor ----------------------------------------------------------------------------------
// A matrix range (elements [first, first + n) of a matrix with `cols` columns) is walked in tiles of
// 32 columns (a warp's lanes, so loads coalesce) by 8 warps of 8 rows each, blocks over the
// column tiles (x) and the rows the range touches (y, grid-stride): no element needs a division.
constexpr int kTileRows = 64, kTileThreads = 256;

struct MatrixRange {
  size_t first, n, cols, row0, rows;  // rows: those the range touches, from row0
  __device__ __forceinline__ bool holds(size_t k) const { return k >= first && k < first + n; }
};

MatrixRange matrix_range(size_t first, size_t n, size_t cols) {
  const MatrixSpan s = matrix_span(first, n, cols);
  return {first, n, cols, s.row0, s.rows};
}

dim3 matrix_grid(const MatrixRange& m) {
  return dim3(div_up(m.cols, kWarp), unsigned(std::min<size_t>(div_up(m.rows, kTileRows), 65535)));
}

// Calls fn(r, c, i) for every element of the range in this thread's share: i = r cols + c - first.
template <typename Fn>
__device__ __forceinline__ void for_matrix_range(const MatrixRange& m, Fn fn) {
  const size_t c = size_t(blockIdx.x) * kWarp + threadIdx.x % kWarp;
  const size_t lane = threadIdx.x / kWarp, lanes = kTileThreads / kWarp;
  for (size_t tile = blockIdx.y; tile * kTileRows < m.rows; tile += gridDim.y) {
    const size_t end = min(m.rows, (tile + 1) * kTileRows);
    for (size_t rr = tile * kTileRows + lane; rr < end; rr += lanes) {
      const size_t r = m.row0 + rr, k = r * m.cols + c;
      fn(r, c, m.holds(k) && c < m.cols, k - m.first);
    }
  }
}

// g^2 + eps summed per row (a warp's lanes, then one atomicAdd a row and tile) and per column
// (this thread's rows in double, then the block's 8 warps, one atomicAdd a column and block).
// Float atomics: the order of the partials moves a sum by a float's rounding from run to run.
template <typename G>
__global__ void adafactor_sums_kernel(MatrixRange m, float scale, float eps, const G* grad, float* row_sums,
                                      float* col_sums) {
  __shared__ double partial[kTileThreads / kWarp][kWarp];
  double col = 0;
  for_matrix_range(m, [&](size_t r, size_t c, bool in, size_t i) {
    float q = 0;
    if (in) {
      const float g = load_float(grad, i) * scale;
      q = fmaf(g, g, eps);
    }
    col += q;
    const float row = warp_sum(q);
    if (threadIdx.x % kWarp == 0 && row != 0) atomicAdd(row_sums + r, row);
  });
  partial[threadIdx.x / kWarp][threadIdx.x % kWarp] = col;
  __syncthreads();
  const size_t c = size_t(blockIdx.x) * kWarp + threadIdx.x;
  if (threadIdx.x < kWarp && c < m.cols) {
    double total = 0;
    for (int w = 0; w < kTileThreads / kWarp; ++w) total += partial[w][threadIdx.x];
    if (total != 0) atomicAdd(col_sums + c, float(total));
  }
}

// One block: both factors' moving averages, then the rows over their mean (double).
__global__ void adafactor_factors_kernel(float b2, float eps_floor, float* row, float* col, const float* row_sums,
                                         const float* col_sums, size_t rows, size_t cols, float* scaled_row) {
  __shared__ double shared[kWarp];
  __shared__ float mean;
  const float one_minus = 1 - b2, fcols = float(cols), frows = float(rows);
  double total = 0;
  for (size_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float v = fmaf(b2, row[r], one_minus * (row_sums[r] / fcols));
    row[r] = v;
    total += v;
  }
  for (size_t c = threadIdx.x; c < cols; c += blockDim.x) col[c] = fmaf(b2, col[c], one_minus * (col_sums[c] / frows));
  total = block_sum(total, shared);
  if (threadIdx.x == 0) mean = fmaxf(float(total / double(rows)), eps_floor);
  __syncthreads();
  for (size_t r = threadIdx.x; r < rows; r += blockDim.x) scaled_row[r] = row[r] / mean;
}

__device__ __forceinline__ float adafactor_u(float g, float v, float floor) { return (1.0f / sqrtf(fmaxf(v, floor))) * g; }

struct AdafactorScalars {
  float scale, eps, floor, b1, one_minus_b1, b2, one_minus_b2;
};

AdafactorScalars adafactor_scalars(const OptimizerStepArgs& a) {
  return {a.grad_scale, a.eps, a.eps_floor * a.eps_floor, a.beta1, 1 - a.beta1, a.beta2, 1 - a.beta2};
}

// The norms pass: sum(w^2) and sum(u^2) in double per thread, per block, one atomicAdd each per
// block. A 1-D tensor (v.exp_avg_sq) updates its second moment on the way.
template <typename G>
__global__ void adafactor_norms_kernel(AdafactorScalars s, MatrixRange m, AdafactorMoment v, const float* master,
                                       const G* grad, double* sums) {
  __shared__ double shared[kWarp];
  double w2 = 0, u2 = 0;
  if (v.scaled_row) {  // factored (AdafactorMoment::factored is host code)
    for_matrix_range(m, [&](size_t r, size_t c, bool in, size_t i) {
      if (!in) return;
      const float w = master ? master[i] : 0.0f;
      const float u = adafactor_u(load_float(grad, i) * s.scale, v.scaled_row[r] * v.col[c], s.floor);
      w2 += double(w) * w;
      u2 += double(u) * u;
    });
  } else {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m.n; i += stride) {
      const float g = load_float(grad, i) * s.scale, w = master ? master[i] : 0.0f;
      const float vi = fmaf(s.b2, v.exp_avg_sq[i], s.one_minus_b2 * fmaf(g, g, s.eps));
      v.exp_avg_sq[i] = vi;
      const float u = adafactor_u(g, vi, s.floor);
      w2 += double(w) * w;
      u2 += double(u) * u;
    }
  }
  w2 = block_sum(w2, shared);
  u2 = block_sum(u2, shared);
  if (threadIdx.x == 0) {
    atomicAdd(sums, w2);
    atomicAdd(sums + 1, u2);
  }
}

// The apply pass: p = scale u (then the first moment), w = w - decay w - p; the CPU's fmas.
template <typename G, typename P>
__global__ void adafactor_apply_kernel(AdafactorScalars s, float scale_u, float decay, MatrixRange m,
                                       AdafactorMoment v, float* master, float* exp_avg, const G* grad, P* param,
                                       bool write_param) {
  const auto step = [&](size_t i, float vi) {
    float upd = adafactor_u(load_float(grad, i) * s.scale, vi, s.floor) * scale_u;
    if (exp_avg) {
      upd = fmaf(s.b1, exp_avg[i], s.one_minus_b1 * upd);
      exp_avg[i] = upd;
    }
    const float w = fmaf(-decay, master[i], master[i]) - upd;
    master[i] = w;
    if (write_param) store_float(param, i, w);
  };
  if (v.scaled_row) {  // factored (AdafactorMoment::factored is host code)
    for_matrix_range(m, [&](size_t r, size_t c, bool in, size_t i) {
      if (in) step(i, v.scaled_row[r] * v.col[c]);
    });
  } else {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m.n; i += stride) step(i, v.exp_avg_sq[i]);
  }
}

class CudaOptimizerOps final : public OptimizerOps {
 public:
  explicit CudaOptimizerOps(CudaContext& ctx) : ctx_(ctx) {}

  void adam_step(const OptimizerStepArgs& args, float* master, float* exp_avg, float* exp_avg_sq, const void* grad,
                 DType grad_dtype, void* param, DType param_dtype, size_t n) override {
    const AdamScalars s = adam_scalars(args);
    with_storage_type(grad_dtype, [&](auto* g) {
      with_storage_type(param_dtype, [&](auto* p) {
        using G = std::remove_pointer_t<decltype(g)>;
        using P = std::remove_pointer_t<decltype(p)>;
        constexpr int N = 4;  // one float4 of master and of each moment per thread
        AdamOp<G, P> op{s, master, exp_avg, exp_avg_sq, static_cast<const G*>(grad), static_cast<P*>(param),
                        static_cast<void*>(param) != static_cast<void*>(master)};
        const bool vectorised = is_aligned(master, 16) && is_aligned(exp_avg, 16) && is_aligned(exp_avg_sq, 16) &&
                                is_aligned(grad, vec_align<G, N>()) && is_aligned(param, vec_align<P, N>());
        launch_elementwise<N>(op, n, vectorised, ctx_.compute, ctx_.sm_count, "adam_kernel");
      });
    });
  }

  void lion_step(const OptimizerStepArgs& a, float* master, float* exp_avg, const void* grad, DType grad_dtype,
                 void* param, DType param_dtype, size_t n) override {
    const LionRule rule{a.beta1, a.beta2, 1 - a.beta1, 1 - a.beta2, a.lr, 1.0f - a.lr * a.weight_decay, a.grad_scale};
    one_moment_step(rule, master, exp_avg, grad, grad_dtype, param, param_dtype, n, "lion_kernel");
  }

  void adagrad_step(const OptimizerStepArgs& a, float* master, float* exp_avg_sq, const void* grad,
                    DType grad_dtype, void* param, DType param_dtype, size_t n) override {
    const AdagradRule rule{a.lr, a.weight_decay, a.eps, a.grad_scale};
    one_moment_step(rule, master, exp_avg_sq, grad, grad_dtype, param, param_dtype, n, "adagrad_kernel");
  }

  void lamb_moments(const OptimizerStepArgs& a, const float* master, float* m, float* v, const void* grad,
                    DType grad_dtype, size_t n, double* sums) override {
    if (n == 0) return;
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      constexpr int kThreads = 512;
      lamb_moments_kernel<G><<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
          lamb_scalars(a), master, m, v, static_cast<const G*>(grad), n, sums);
      ZT_CUDA_CHECK_LAUNCH("lamb_moments_kernel");
    });
  }

  void lamb_apply(const OptimizerStepArgs& a, float trust_ratio, float* master, const float* m, const float* v,
                  void* param, DType param_dtype, size_t n) override {
    const float step = -a.lr * std::sqrt(a.bias_correction2) / a.bias_correction1 * trust_ratio;
    with_storage_type(param_dtype, [&](auto* p) {
      using P = std::remove_pointer_t<decltype(p)>;
      constexpr int N = 4;
      LambApplyOp<P> op{lamb_scalars(a), step, master, m, v, static_cast<P*>(param),
                        static_cast<void*>(param) != static_cast<void*>(master)};
      const bool vectorised = is_aligned(master, 16) && is_aligned(m, 16) && is_aligned(v, 16) &&
                              is_aligned(param, vec_align<P, N>());
      launch_elementwise<N>(op, n, vectorised, ctx_.compute, ctx_.sm_count, "lamb_apply_kernel");
    });
  }

  void muon_momentum(const OptimizerStepArgs& a, float* m, const void* grad, DType grad_dtype, float* update,
                     size_t n) override {
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      constexpr int N = 4;
      MuonMomentumOp<G> op{a.momentum, 1 - a.momentum, a.grad_scale, m, static_cast<const G*>(grad), update};
      const bool vectorised = is_aligned(m, 16) && is_aligned(update, 16) && is_aligned(grad, vec_align<G, N>());
      launch_elementwise<N>(op, n, vectorised, ctx_.compute, ctx_.sm_count, "muon_momentum_kernel");
    });
  }

  void muon_apply(const OptimizerStepArgs& a, float* master, const float* update, void* param, DType param_dtype,
                  size_t n) override {
    with_storage_type(param_dtype, [&](auto* p) {
      using P = std::remove_pointer_t<decltype(p)>;
      constexpr int N = 4;
      MuonApplyOp<P> op{1.0f - a.muon_lr * a.weight_decay, -a.muon_lr, master, update, static_cast<P*>(param),
                        static_cast<void*>(param) != static_cast<void*>(master)};
      const bool vectorised = is_aligned(master, 16) && is_aligned(update, 16) && is_aligned(param, vec_align<P, N>());
      launch_elementwise<N>(op, n, vectorised, ctx_.compute, ctx_.sm_count, "muon_apply_kernel");
    });
  }

  void adafactor_sums(const OptimizerStepArgs& a, const void* grad, DType grad_dtype, size_t n, size_t first,
                      size_t cols, float* row_sums, float* col_sums) override {
    if (n == 0) return;
    const MatrixRange m = matrix_range(first, n, cols);
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      adafactor_sums_kernel<G><<<matrix_grid(m), kTileThreads, 0, ctx_.compute>>>(
          m, a.grad_scale, a.eps, static_cast<const G*>(grad), row_sums, col_sums);
      ZT_CUDA_CHECK_LAUNCH("adafactor_sums_kernel");
    });
  }

  void adafactor_factors(const OptimizerStepArgs& a, float* row, float* col, const float* row_sums,
                         const float* col_sums, size_t rows, size_t cols, float* scaled_row) override {
    adafactor_factors_kernel<<<1, 1024, 0, ctx_.compute>>>(a.beta2, a.eps_floor, row, col, row_sums, col_sums, rows,
                                                             cols, scaled_row);
    ZT_CUDA_CHECK_LAUNCH("adafactor_factors_kernel");
  }

  void adafactor_norms(const OptimizerStepArgs& a, const float* master, const AdafactorMoment& v, const void* grad,
                       DType grad_dtype, size_t n, double* sums) override {
    if (n == 0) return;
    const MatrixRange m = v.factored() ? matrix_range(v.first, n, v.cols) : MatrixRange{0, n, 0, 0, 0};
    const dim3 grid = v.factored() ? matrix_grid(m) : dim3(grid_for(n, kTileThreads, ctx_.sm_count));
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      adafactor_norms_kernel<G><<<grid, kTileThreads, 0, ctx_.compute>>>(adafactor_scalars(a), m, v, master,
                                                                         static_cast<const G*>(grad), sums);
      ZT_CUDA_CHECK_LAUNCH("adafactor_norms_kernel");
    });
  }

  void adafactor_apply(const OptimizerStepArgs& a, float scale, float decay, float* master, float* exp_avg,
                       const AdafactorMoment& v, const void* grad, DType grad_dtype, void* param, DType param_dtype,
                       size_t n) override {
    if (n == 0) return;
    const MatrixRange m = v.factored() ? matrix_range(v.first, n, v.cols) : MatrixRange{0, n, 0, 0, 0};
    const dim3 grid = v.factored() ? matrix_grid(m) : dim3(grid_for(n, kTileThreads, ctx_.sm_count));
    with_storage_type(grad_dtype, [&](auto* g) {
      with_storage_type(param_dtype, [&](auto* p) {
        using G = std::remove_pointer_t<decltype(g)>;
        using P = std::remove_pointer_t<decltype(p)>;
        adafactor_apply_kernel<G, P><<<grid, kTileThreads, 0, ctx_.compute>>>(
            adafactor_scalars(a), scale, decay, m, v, master, exp_avg, static_cast<const G*>(grad),
            static_cast<P*>(param), static_cast<void*>(param) != static_cast<void*>(master));
        ZT_CUDA_CHECK_LAUNCH("adafactor_apply_kernel");
      });
    });
  }

  void onebit_momentum_sums(const OptimizerStepArgs& a, float* m, const void* grad, DType grad_dtype, size_t n,
                            const float* error, size_t padded, double* sum) override {
    if (padded == 0) return;
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      constexpr int kThreads = 512;
      onebit_momentum_sums_kernel<G><<<grid_for(padded, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
          a.beta1, 1 - a.beta1, a.grad_scale, m, static_cast<const G*>(grad), n, error, padded, sum);
      ZT_CUDA_CHECK_LAUNCH("onebit_momentum_sums_kernel");
    });
  }

  void onebit_server_sums(const SignBlocks& in, float* error, double* sum) override {
    if (in.chunk == 0) return;
    constexpr int kThreads = 512;
    onebit_server_sums_kernel<<<grid_for(in.chunk, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
        in, 1.0f / float(in.blocks), error, sum);
    ZT_CUDA_CHECK_LAUNCH("onebit_server_sums_kernel");
  }

  void onebit_compress(const float* x, size_t n, float* error, size_t padded, const double* sum,
                       const SignBlocks& out) override {
    const size_t words = out.blocks * ((out.chunk + 31) / 32);
    if (words == 0) return;
    constexpr int kThreads = 256;
    onebit_compress_kernel<<<grid_for(words, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(x, n, error,
                                                                                                     padded, sum, out);
    ZT_CUDA_CHECK_LAUNCH("onebit_compress_kernel");
  }

  void onebit_apply(const OptimizerStepArgs& a, float* master, float* m, const float* v, const SignBlocks& in,
                    void* param, DType param_dtype, size_t n) override {
    if (n == 0) return;
    with_storage_type(param_dtype, [&](auto* p) {
      using P = std::remove_pointer_t<decltype(p)>;
      constexpr int kThreads = 256;
      onebit_apply_kernel<P><<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
          -a.lr, a.weight_decay, a.eps, master, m, v, in, static_cast<P*>(param),
          static_cast<void*>(param) != static_cast<void*>(master), n);
      ZT_CUDA_CHECK_LAUNCH("onebit_apply_kernel");
    });
  }

  void onebit_lamb_momentum(const OptimizerStepArgs& a, float scale, const float* m, const void* grad,
                            DType grad_dtype, float* x, size_t n) override {
    if (n == 0) return;
    with_storage_type(grad_dtype, [&](auto* g) {
      using G = std::remove_pointer_t<decltype(g)>;
      constexpr int kThreads = 256;
      onebit_lamb_momentum_kernel<G><<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
          a.beta1, 1 - a.beta1, a.grad_scale, scale, m, static_cast<const G*>(grad), x, n);
      ZT_CUDA_CHECK_LAUNCH("onebit_lamb_momentum_kernel");
    });
  }

  void onebit_decompress(const SignBlocks& in, float* out, size_t n) override {
    if (n == 0) return;
    constexpr int kThreads = 256;
    onebit_decompress_kernel<<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(in, out, n);
    ZT_CUDA_CHECK_LAUNCH("onebit_decompress_kernel");
  }

  void onebit_lamb_stats(const OptimizerStepArgs& a, float scale, const float* master, float* m, const float* v,
                         float* f, const float* x, size_t n, double* sums) override {
    if (n == 0) return;
    constexpr int kThreads = 512;
    onebit_lamb_stats_kernel<<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
        a.beta1, a.beta2, 1 - a.beta1, 1 - a.beta2, a.weight_decay, a.eps, scale, master, m, v, f, x, n, sums);
    ZT_CUDA_CHECK_LAUNCH("onebit_lamb_stats_kernel");
  }

  void zero_one_pass(const ZeroOneArgs& z, const OptimizerStepArgs& a, float* master, float* m, const float* v,
                     float* u, const void* grad, DType grad_dtype, const SignBlocks& in, void* param,
                     DType param_dtype, size_t n) override {
    if (n == 0) return;
    const ZeroOneScalars k{a.beta1, 1 - a.beta1, a.weight_decay, a.eps, -a.lr, a.grad_scale, z.lrs, z.fresh};
    with_storage_type(param_dtype, [&](auto* p) {
      with_storage_type(grad ? grad_dtype : DType::kF32, [&](auto* g) {
        using P = std::remove_pointer_t<decltype(p)>;
        using G = std::remove_pointer_t<decltype(g)>;
        const auto launch = [&](auto kernel) {
          constexpr int kThreads = 256;
          kernel<<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
              k, master, m, v, u, static_cast<const G*>(grad), in, static_cast<P*>(param),
              static_cast<void*>(param) != static_cast<void*>(master), n);
          ZT_CUDA_CHECK_LAUNCH("zero_one_kernel");
        };
        switch (z.pass) {
          case ZeroOnePass::kCompressedGrad: return launch(zero_one_kernel<ZeroOnePass::kCompressedGrad, P, G>);
          case ZeroOnePass::kLocal: return launch(zero_one_kernel<ZeroOnePass::kLocal, P, G>);
          case ZeroOnePass::kSyncPrepare: return launch(zero_one_kernel<ZeroOnePass::kSyncPrepare, P, G>);
          case ZeroOnePass::kSync: return launch(zero_one_kernel<ZeroOnePass::kSync, P, G>);
        }
      });
    });
  }

  void axpby(float* y, float a, const float* x, float b, size_t n) override {
    constexpr int N = 4;
    const bool vectorised = is_aligned(y, 16) && is_aligned(x, 16);
    launch_elementwise<N>(AxpbyOp{a, b, y, x}, n, vectorised, ctx_.compute, ctx_.sm_count, "axpby_kernel");
  }

  void scale_by_inverse_norm(float* x, size_t n, const double* sum_sq, float eps) override {
    if (n == 0) return;
    constexpr int kThreads = 256;
    scale_by_inverse_norm_kernel<<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(x, n, sum_sq,
                                                                                                         eps);
    ZT_CUDA_CHECK_LAUNCH("scale_by_inverse_norm_kernel");
  }

  void add_diagonal(float* x, size_t n, float a) override {
    if (n == 0) return;
    constexpr int kThreads = 256;
    add_diagonal_kernel<<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(x, n, a);
    ZT_CUDA_CHECK_LAUNCH("add_diagonal_kernel");
  }

  void sum_squares(const void* data, DType dtype, size_t n, double* out) override {
    if (n == 0) return;
    with_storage_type(dtype, [&](auto* d) {
      using T = std::remove_pointer_t<decltype(d)>;
      constexpr int kThreads = 512;
      const unsigned blocks = grid_for(n, kThreads, ctx_.sm_count);
      auto* partials = static_cast<double*>(ctx_.scratch(sizeof(double) * blocks));
      sum_squares_kernel<T><<<blocks, kThreads, 0, ctx_.compute>>>(static_cast<const T*>(data), n, partials);
      ZT_CUDA_CHECK_LAUNCH("sum_squares_kernel");
      add_partials_kernel<<<1, 256, 0, ctx_.compute>>>(partials, blocks, out);
      ZT_CUDA_CHECK_LAUNCH("add_partials_kernel");
    });
  }

  void quantize(const void* x, DType dtype, size_t n, size_t block, int bits, void* q, float* scales) override {
    if (n == 0) return;
    ZT_CHECK((bits == 8 || (bits == 4 && block % 2 == 0)) && block > 0 && (n + block - 1) / block <= size_t(INT32_MAX),
             "quantize: ", n, " elements of ", bits, " bits in blocks of ", block);
    with_storage_type(dtype, [&](auto* d) {
      using T = std::remove_pointer_t<decltype(d)>;
      constexpr int kThreads = 256;
      quantize_kernel<T><<<unsigned((n + block - 1) / block), kThreads, 0, ctx_.compute>>>(
          static_cast<const T*>(x), n, block, bits, static_cast<uint8_t*>(q), scales);
      ZT_CUDA_CHECK_LAUNCH("quantize_kernel");
    });
  }

  void dequantize(const void* q, const float* scales, size_t n, size_t block, int bits, void* x, DType dtype) override {
    if (n == 0) return;
    with_storage_type(dtype, [&](auto* d) {
      using T = std::remove_pointer_t<decltype(d)>;
      constexpr int kThreads = 256;
      dequantize_kernel<T><<<grid_for(n, kThreads, ctx_.sm_count), kThreads, 0, ctx_.compute>>>(
          static_cast<const uint8_t*>(q), scales, n, block, bits, static_cast<T*>(x));
      ZT_CUDA_CHECK_LAUNCH("dequantize_kernel");
    });
  }

  void accumulate_into(void* acc, DType acc_dtype, const void* x, DType x_dtype, size_t n) override {
    with_storage_type(acc_dtype, [&](auto* a) {
      with_storage_type(x_dtype, [&](auto* b) {
        using A = std::remove_pointer_t<decltype(a)>;
        using X = std::remove_pointer_t<decltype(b)>;
        constexpr int N = (sizeof(A) == 4 || sizeof(X) == 4) ? 4 : 8;
        const bool vectorised = is_aligned(acc, vec_align<A, N>()) && is_aligned(x, vec_align<X, N>());
        launch_elementwise<N>(AccumulateOp<A, X>{static_cast<A*>(acc), static_cast<const X*>(x)}, n, vectorised,
                              ctx_.compute, ctx_.sm_count, "accumulate_into_kernel");
      });
    });
  }

  void zero(void* data, DType dtype, size_t n) override {
    if (n) ZT_CUDA_CHECK(cudaMemsetAsync(data, 0, n * dtype_size(dtype), ctx_.compute));
  }

 private:
  template <typename Rule>
  void one_moment_step(const Rule& rule, float* master, float* moment, const void* grad, DType grad_dtype,
                       void* param, DType param_dtype, size_t n, const char* name) {
    with_storage_type(grad_dtype, [&](auto* g) {
      with_storage_type(param_dtype, [&](auto* p) {
        using G = std::remove_pointer_t<decltype(g)>;
        using P = std::remove_pointer_t<decltype(p)>;
        constexpr int N = 4;
        OneMomentOp<G, P, Rule> op{rule, master, moment, static_cast<const G*>(grad), static_cast<P*>(param),
                                   static_cast<void*>(param) != static_cast<void*>(master)};
        const bool vectorised = is_aligned(master, 16) && is_aligned(moment, 16) &&
                                is_aligned(grad, vec_align<G, N>()) && is_aligned(param, vec_align<P, N>());
        launch_elementwise<N>(op, n, vectorised, ctx_.compute, ctx_.sm_count, name);
      });
    });
  }

  CudaContext& ctx_;
};

}  // namespace

std::unique_ptr<OptimizerOps> make_cuda_optimizer_ops(CudaContext& ctx) {
  return std::make_unique<CudaOptimizerOps>(ctx);
}

}  // namespace zt::cuda
