// The Llama family's kernels of the CUDA KernelOps (cuda_llama_ops.cu), called from
// cuda_kernels.cu: RMSNorm, rotary position embedding, causal grouped-query attention and SwiGLU.
// Shapes and semantics are kernel_ops.h's, results the CPU's (cpu_kernels.inc); every launch is on
// ctx.compute and never synchronises the host.
#pragma once

#include <cstddef>

#include "backend/cuda/cuda_context.h"

namespace zt::cuda {

/// out[rows,C] = weight * (x * rstd), rstd[rows] = 1 / sqrt(mean(x^2) + eps).
void launch_rmsnorm_forward(CudaContext& ctx, float* out, float* rstd, const float* x, const float* weight, int rows,
                            int C, double eps);
/// dx += ... (per row), dweight += column sums of dout * x * rstd (deterministic; ctx.scratch).
void launch_rmsnorm_backward(CudaContext& ctx, float* dx, float* dweight, const float* dout, const float* x,
                             const float* weight, const float* rstd, int rows, int C);

/// RoPE in place on x[B,T,heads,hs] with cos, sin [T, hs/2]; `inverse` rotates by -angle.
void launch_rotary(CudaContext& ctx, float* x, const float* cos, const float* sin, int B, int T, int heads, int hs,
                   bool inverse);

/// out[B,Tq,NH,hs] and att[B,NH,Tq,Tk] from q[B,Tq,NH,hs], k and v [B,Tk,NKV,hs].
void launch_gqa_attention_forward(CudaContext& ctx, float* out, float* att, const float* q, const float* k,
                                  const float* v, int B, int Tq, int Tk, int NH, int NKV, int hs);
/// dq, dk, dv (overwritten) for Tq = Tk = T; B*NH*T*T floats of ctx.scratch.
void launch_gqa_attention_backward(CudaContext& ctx, float* dq, float* dk, float* dv, const float* dout,
                                   const float* q, const float* k, const float* v, const float* att, int B, int T,
                                   int NH, int NKV, int hs);

/// out = silu(gate) * up.
void launch_swiglu_forward(CudaContext& ctx, float* out, const float* gate, const float* up, size_t n);
/// dgate, dup (overwritten) from dout.
void launch_swiglu_backward(CudaContext& ctx, float* dgate, float* dup, const float* dout, const float* gate,
                            const float* up, size_t n);

}  // namespace zt::cuda
