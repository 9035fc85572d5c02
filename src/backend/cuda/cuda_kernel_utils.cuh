// Device helpers shared by the CUDA kernels: dtype conversions that equal the CPU's bit for bit
// (core/dtype.h), vector loads and stores of 4 or 8 elements, warp and block reductions, and the
// launch arithmetic. Private to src/backend/cuda/.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"

namespace zt::cuda {

constexpr int kWarp = 32;

inline unsigned div_up(size_t a, size_t b) { return unsigned((a + b - 1) / b); }

/// Blocks for a grid-stride loop over `work` items: enough to fill the GPU a few times over,
/// never more than the work needs (the loops are grid-stride, so any count is correct).
inline unsigned grid_for(size_t work, int threads, int sm_count) {
  const size_t cap = size_t(sm_count > 0 ? sm_count : 128) * 16;
  return unsigned(std::max<size_t>(1, std::min<size_t>(div_up(work, size_t(threads)), cap)));
}

/// True when p is aligned to `bytes` (the vector paths need whole 8- or 16-byte accesses).
inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// True when every pointer is 16-byte aligned: the fp32 elementwise ops' float4 paths.
inline bool all_aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (!is_aligned(p, 16)) return false;
  return true;
}

// ---- conversions ------------------------------------------------------------------------------
// Written out with bit operations rather than cuda_bf16.h's intrinsics where NaN is involved: the
// hardware conversions return a canonical NaN, the CPU keeps the sign and the payload's top bits
// (quietened), and casts must agree bit for bit.

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) { return __uint_as_float(bits << 16); }

/// Round to nearest even; NaN keeps its sign and top payload bits and is quietened (as to_bf16).
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// fp16 -> fp32 is exact; a NaN keeps sign and payload and is quietened, as x86's F16C does.
__device__ __forceinline__ float f16_bits_to_float(uint32_t bits) {
  if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0)
    return __uint_as_float(((bits & 0x8000u) << 16) | 0x7fc00000u | ((bits & 0x03ffu) << 13));
  return __half2float(__ushort_as_half(uint16_t(bits)));
}

/// Round to nearest even, overflow to inf (cvt.rn.f16.f32); NaN as F16C: sign, quiet bit, payload's
/// top 10 bits.
__device__ __forceinline__ uint16_t float_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x03ffu));
  return __half_as_ushort(__float2half_rn(f));
}

// Scalar loads and stores of one element in any storage type, as fp32.
__device__ __forceinline__ float load_float(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_float(const bf16* p, size_t i) { return bf16_bits_to_float(p[i].bits); }
__device__ __forceinline__ float load_float(const fp16* p, size_t i) { return f16_bits_to_float(p[i].bits); }

__device__ __forceinline__ void store_float(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_float(bf16* p, size_t i, float v) { p[i].bits = float_to_bf16_bits(v); }
__device__ __forceinline__ void store_float(fp16* p, size_t i, float v) { p[i].bits = float_to_f16_bits(v); }

__device__ __forceinline__ float bits_to_float(bf16*, uint32_t bits) { return bf16_bits_to_float(bits); }
__device__ __forceinline__ float bits_to_float(fp16*, uint32_t bits) { return f16_bits_to_float(bits); }
__device__ __forceinline__ uint32_t float_to_bits(bf16*, float v) { return float_to_bf16_bits(v); }
__device__ __forceinline__ uint32_t float_to_bits(fp16*, float v) { return float_to_f16_bits(v); }

// ---- vector loads and stores ------------------------------------------------------------------
// N consecutive elements (N = 4 or 8) starting at p, which must be aligned to vec_align<T, N>():
// fp32 as float4s, 16-bit types as 8 or 16 bytes of packed pairs (element 0 in the low half).

template <typename T, int N>
constexpr size_t vec_align() {
  return std::min<size_t>(16, sizeof(T) * N);
}

template <int N>
__device__ __forceinline__ void load_vec(const float* p, float (&out)[N]) {
  static_assert(N % 4 == 0);
#pragma unroll
  for (int j = 0; j < N; j += 4) {
    const float4 v = reinterpret_cast<const float4*>(p)[j / 4];
    out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
  }
}

template <int N>
__device__ __forceinline__ void store_vec(float* p, const float (&in)[N]) {
  static_assert(N % 4 == 0);
#pragma unroll
  for (int j = 0; j < N; j += 4) reinterpret_cast<float4*>(p)[j / 4] = make_float4(in[j], in[j + 1], in[j + 2], in[j + 3]);
}

template <int N, typename H>
__device__ __forceinline__ void load_vec(const H* p, float (&out)[N]) {
  static_assert(N == 4 || N == 8);
  uint32_t words[N / 2];
  if constexpr (N == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    words[0] = v.x, words[1] = v.y;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  }
#pragma unroll
  for (int j = 0; j < N / 2; ++j) {
    out[2 * j] = bits_to_float(static_cast<H*>(nullptr), words[j] & 0xffffu);
    out[2 * j + 1] = bits_to_float(static_cast<H*>(nullptr), words[j] >> 16);
  }
}

template <int N, typename H>
__device__ __forceinline__ void store_vec(H* p, const float (&in)[N]) {
  static_assert(N == 4 || N == 8);
  uint32_t words[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j)
    words[j] = float_to_bits(static_cast<H*>(nullptr), in[2 * j]) |
               (float_to_bits(static_cast<H*>(nullptr), in[2 * j + 1]) << 16);
  if constexpr (N == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(words[0], words[1]);
  } else {
    *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

/// Runs fn(pointer type) for the storage type of `t`: float, bf16 or fp16.
template <typename Fn>
void with_storage_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(static_cast<float*>(nullptr)); return;
    case DType::kBF16: fn(static_cast<bf16*>(nullptr)); return;
    case DType::kF16: fn(static_cast<fp16*>(nullptr)); return;
  }
}

// ---- elementwise driver -----------------------------------------------------------------------
// Op has apply(i) for one element and apply_vec<N>(i) for elements i..i+N-1. The vector part runs
// over the first n / N * N elements when every pointer the op touches is aligned, the scalar tail
// (or everything, when not aligned) after it; both grid-stride.
template <int N, typename Op>
__global__ void elementwise_kernel(Op op, size_t n, bool vectorised) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t n_vec = vectorised ? n / N : 0;
  for (size_t j = tid; j < n_vec; j += stride) op.template apply_vec<N>(j * N);
  for (size_t i = n_vec * N + tid; i < n; i += stride) op.apply(i);
}

template <int N, typename Op>
void launch_elementwise(const Op& op, size_t n, bool vectorised, cudaStream_t stream, int sm_count,
                        const char* name) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const size_t work = vectorised ? n / N + n % N : n;
  elementwise_kernel<N><<<grid_for(work, kThreads, sm_count), kThreads, 0, stream>>>(op, n, vectorised);
  ZT_CUDA_CHECK_LAUNCH(name);
}

// ---- reductions -------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The sum over the block, returned to every thread. blockDim.x is a multiple of 32 (at most
/// 1024); `shared` holds 32 values. Ends with a barrier, so it can be called again at once.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();  // shared is reused by the next call
  return total;
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

}  // namespace zt::cuda
