// The plain-kernel causal attention of the CUDA KernelOps (cuda_attention.cu), called from
// cuda_kernels.cu. Same layout and results as the CPU's: qkv[B,T,3C] holds q, k, v side by side in
// each row, head h owns channels [h*hs, (h+1)*hs) of each, att[B,NH,T,T] holds the probabilities
// with zeros above the diagonal.
#pragma once

#include "backend/cuda/cuda_context.h"

namespace zt::cuda {

/// out[B,T,C] and att[B,NH,T,T] from qkv, on ctx.compute.
void launch_attention_forward(CudaContext& ctx, float* out, float* att, const float* qkv, int B, int T, int C,
                              int NH);
/// dqkv (overwritten) from dout, qkv and the saved att, on ctx.compute; B*NH*T*T floats of scratch.
void launch_attention_backward(CudaContext& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                               int B, int T, int C, int NH);

}  // namespace zt::cuda
