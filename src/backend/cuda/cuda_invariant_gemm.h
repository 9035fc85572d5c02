// Batch-invariant fp32 GEMMs on the device (KernelOps::set_batch_invariant; the CPU's are
// backend/cpu/invariant_gemm.h): every output element summed in one fixed order whatever the
// number of rows, so a row's bits depend only on its own input row and the weights. cuBLASLt
// picks its algorithm (and its split of k) by the shape, which this must not. Launched on
// ctx.compute; plain CUDA-core FMAs, no tensor cores: the decoder's rows are few.
#pragma once

#include "backend/cuda/cuda_context.h"

namespace zt::cuda {

/// out[M,N] = x[M,K] @ w[N,K]^T + bias (nn.Linear's layout; bias may be null). Each element:
/// lane j of a warp sums k = j, j+32, ... by FMA in order, then the lanes in a fixed butterfly.
void launch_invariant_gemm_nt(CudaContext& ctx, float* out, const float* x, const float* w, const float* bias, int M,
                              int N, int K);
/// out[M,N] = x[M,K] @ w[K,N] + bias (GPT-2's Conv1D layout). Each element: one FMA chain over
/// k = 0, 1, ... in order.
void launch_invariant_gemm_nn(CudaContext& ctx, float* out, const float* x, const float* w, const float* bias, int M,
                              int N, int K);

}  // namespace zt::cuda
