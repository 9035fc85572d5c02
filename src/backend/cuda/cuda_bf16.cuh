// Device helpers of the bf16 kernels (cuda_kernels_bf16.cu, cuda_llama_ops_bf16.cu): 16-byte
// vector loads and stores of 8 bf16 values as fp32, and deterministic column sums over bf16
// matrices read 8 columns at a time. Private to src/backend/cuda/.
//
// Every bf16 kernel reads its bf16 operands exactly (bf16 -> fp32 is a shift), computes in fp32
// as the fp32 kernel of the same op does, and rounds each bf16 output once, to nearest even
// (cvt.rn.bf16x2.f32: one instruction per pair). That equals the CPU's to_bf16 for every value
// but NaN, whose payload the hardware does not keep; activations carry no NaN payloads worth
// keeping, and the casts that must agree bit for bit (launch_cast) keep their own bit-exact path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernel_utils.cuh"
#include "core/dtype.h"

namespace zt::cuda {
// An unnamed namespace, as in cuda_column_sums.cuh: each .cu that includes this has its own copy.
namespace {

// ---- conversions and vector access --------------------------------------------------------------
// N = 8: one 16-byte access (p aligned to 16 bytes); N = 1: one 2-byte access, the fallback for
// unaligned pointers and odd sizes. Element 0 sits in the low half of the first word.

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

/// Two floats rounded to nearest even into one word of two bf16 (lo in the low half).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float bf16_to_float(bf16 h) { return __uint_as_float(uint32_t(h.bits) << 16); }
__device__ __forceinline__ bf16 float_to_bf16(float f) {
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(f))};
}

template <int N>
__device__ __forceinline__ void load_bf16(const bf16* p, float (&v)[N]) {
  static_assert(N == 1 || N == 8);
  if constexpr (N == 1) {
    v[0] = bf16_to_float(*p);
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    v[0] = bf16_lo(u.x), v[1] = bf16_hi(u.x), v[2] = bf16_lo(u.y), v[3] = bf16_hi(u.y);
    v[4] = bf16_lo(u.z), v[5] = bf16_hi(u.z), v[6] = bf16_lo(u.w), v[7] = bf16_hi(u.w);
  }
}

template <int N>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&v)[N]) {
  static_assert(N == 1 || N == 8);
  if constexpr (N == 1) {
    *p = float_to_bf16(v[0]);
  } else {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
  }
}

/// N fp32 values (N = 8: two 16-byte loads, p aligned to 16 bytes).
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&v)[N]) {
  static_assert(N == 1 || N == 8);
  if constexpr (N == 1) {
    v[0] = *p;
  } else {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

template <int N>
__device__ __forceinline__ void store_f32(float* p, const float (&v)[N]) {
  static_assert(N == 1 || N == 8);
  if constexpr (N == 1) {
    *p = v[0];
  } else {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

/// True when every pointer is 16-byte aligned and `n` (a row length or an element count) is a
/// multiple of 8, so that every row of every operand starts on 16 bytes: the vector paths.
inline bool vec8_ok(size_t n, std::initializer_list<const void*> pointers) {
  return n % 8 == 0 && all_aligned16(pointers);
}

// ---- column sums, 8 columns per thread ----------------------------------------------------------
// cuda_column_sums.cuh's scheme (pass 1: per chunk of rows, partial sums per column; pass 2: the
// partials added in chunk order) with each thread owning 8 adjacent columns and reading them with
// one 16-byte load per row. A block is 32 threads x 8 row lanes, 256 columns; the row lanes'
// sums meet in shared memory in lane order, so the result repeats bit for bit. Terms::load8(r, c,
// out) gives the two values summed for the elements (r, c..c+7).

constexpr int kColumns8 = kColumnTile * 8;

template <typename Terms>
__global__ void column_partials8_kernel(float2* partials, int rows, int cols, int rows_per_chunk, Terms terms) {
  __shared__ float2 lanes[kRowLanes][8][kColumnTile];  // [row lane][column in the thread's 8][thread]
  const int c0 = (blockIdx.x * kColumnTile + threadIdx.x) * 8;
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float2 acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = make_float2(0, 0);
  if (c0 < cols) {
    for (int r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float2 v[8];
      terms.load8(r, c0, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j].x += v[j].x, acc[j].y += v[j].y;
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) lanes[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  // Thread (x, y) finishes column c0 + y of thread x's eight: the row lanes in order.
  const int j = threadIdx.y, x = threadIdx.x, c = (blockIdx.x * kColumnTile + x) * 8 + j;
  if (c >= cols) return;
  float2 sum = lanes[0][j][x];
  for (int l = 1; l < kRowLanes; ++l) sum.x += lanes[l][j][x].x, sum.y += lanes[l][j][x].y;
  partials[size_t(blockIdx.y) * cols + c] = sum;
}

/// out_x[c] += sum_r terms(r, c).x and, when out_y is given, out_y[c] += sum_r terms(r, c).y, on
/// ctx.compute; `cols` must be a multiple of 8 and Terms' matrices 16-byte aligned. Partials in
/// ctx.scratch.
template <typename Terms>
void add_column_sums8(CudaContext& ctx, float* out_x, float* out_y, int rows, int cols, const Terms& terms) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kFinishThreads = 256;
  const int column_tiles = int(div_up(size_t(cols), kColumns8));
  // About four blocks per SM in all, each over at least 32 rows so that the partials stay small.
  const int wanted = std::max(1, 4 * std::max(ctx.sm_count, 1) / column_tiles);
  int chunks = std::max(1, std::min(wanted, int(div_up(size_t(rows), 32))));
  const int rows_per_chunk = int(div_up(size_t(rows), chunks));
  chunks = int(div_up(size_t(rows), rows_per_chunk));
  auto* partials = static_cast<float2*>(ctx.scratch(sizeof(float2) * size_t(chunks) * cols));
  const dim3 grid(static_cast<unsigned>(column_tiles), static_cast<unsigned>(chunks));
  column_partials8_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, ctx.compute>>>(partials, rows, cols,
                                                                                 rows_per_chunk, terms);
  ZT_CUDA_CHECK_LAUNCH("column_partials8_kernel");
  column_finish_kernel<<<div_up(size_t(cols), kFinishThreads), kFinishThreads, 0, ctx.compute>>>(
      out_x, out_y, partials, chunks, cols);
  ZT_CUDA_CHECK_LAUNCH("column_finish_kernel");
}

}  // namespace
}  // namespace zt::cuda
