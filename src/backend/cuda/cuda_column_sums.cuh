// Deterministic column sums over the rows of a matrix, for the parameter gradients that cross rows
// (bias, layernorm and RMSNorm weights): a fixed summation order instead of atomics, so a run
// repeats bit for bit on the same GPU. Private to src/backend/cuda/.
//
// Pass 1: block (32 columns x 8 row lanes) sums its columns over one chunk of rows into a partial;
// pass 2: one thread per column adds the partials in chunk order into the output(s). Terms(r, c)
// gives the two values summed for element (r, c).
//
// The kernels sit in an unnamed namespace: every .cu that includes this gets its own copy, which
// is what happens to device code anyway without relocatable device code, and no two files'
// host-side launch stubs can clash at link time.
#pragma once

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernel_utils.cuh"

namespace zt::cuda {
namespace {

constexpr int kColumnTile = 32, kRowLanes = 8;

struct ColumnSumPlan {
  int chunks = 0, rows_per_chunk = 0;
};

ColumnSumPlan plan_column_sums(int rows, int cols, int sm_count) {
  // About four blocks per SM in all, each over at least 32 rows so the partials stay small.
  const int column_tiles = int(div_up(size_t(cols), kColumnTile));
  const int wanted = std::max(1, 4 * std::max(sm_count, 1) / column_tiles);
  const int chunks = std::max(1, std::min(wanted, int(div_up(size_t(rows), 32))));
  ColumnSumPlan plan;
  plan.rows_per_chunk = int(div_up(size_t(rows), chunks));
  plan.chunks = int(div_up(size_t(rows), plan.rows_per_chunk));
  return plan;
}

template <typename Terms>
__global__ void column_partials_kernel(float2* partials, int rows, int cols, int rows_per_chunk, Terms terms) {
  __shared__ float2 lanes[kRowLanes][kColumnTile];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float2 acc = make_float2(0, 0);
  if (c < cols) {
    for (int r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float2 v = terms(r, c);
      acc.x += v.x;
      acc.y += v.y;
    }
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int j = 1; j < kRowLanes; ++j) {
      acc.x += lanes[j][threadIdx.x].x;
      acc.y += lanes[j][threadIdx.x].y;
    }
    partials[size_t(blockIdx.y) * cols + c] = acc;
  }
}

__global__ void column_finish_kernel(float* out_x, float* out_y, const float2* partials, int chunks, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float2 sum = partials[c];
  for (int k = 1; k < chunks; ++k) {
    sum.x += partials[size_t(k) * cols + c].x;
    sum.y += partials[size_t(k) * cols + c].y;
  }
  out_x[c] += sum.x;
  if (out_y) out_y[c] += sum.y;
}

/// out_x[c] += sum_r terms(r, c).x and, when out_y is given, out_y[c] += sum_r terms(r, c).y, on
/// ctx.compute; the partials live in ctx.scratch.
template <typename Terms>
void add_column_sums(CudaContext& ctx, float* out_x, float* out_y, int rows, int cols, const Terms& terms) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kFinishThreads = 256;
  const ColumnSumPlan plan = plan_column_sums(rows, cols, ctx.sm_count);
  auto* partials = static_cast<float2*>(ctx.scratch(sizeof(float2) * size_t(plan.chunks) * cols));
  const dim3 grid(div_up(size_t(cols), kColumnTile), unsigned(plan.chunks));
  column_partials_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, ctx.compute>>>(partials, rows, cols,
                                                                                 plan.rows_per_chunk, terms);
  ZT_CUDA_CHECK_LAUNCH("column_partials_kernel");
  column_finish_kernel<<<div_up(size_t(cols), kFinishThreads), kFinishThreads, 0, ctx.compute>>>(
      out_x, out_y, partials, plan.chunks, cols);
  ZT_CUDA_CHECK_LAUNCH("column_finish_kernel");
}

}  // namespace
}  // namespace zt::cuda
