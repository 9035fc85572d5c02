// The parts of the CUDA KernelOps<bf16> (cuda_kernels_bf16.cu) that live in their own files:
// the Llama family's RMSNorm, rotary and SwiGLU (cuda_llama_ops_bf16.cu), and both attentions
// (cuda_attention_bf16.cu, the one place to swap in a fused flash attention). Semantics are
// kernel_ops.h's: bf16 activations, fp32 statistics (S) and parameter gradients (G); each bf16
// output rounded once. Every launch is on ctx.compute and never synchronises the host.
#pragma once

#include <cstddef>

#include "backend/cuda/cuda_context.h"
#include "backend/kernel_ops.h"
#include "core/dtype.h"

namespace zt::cuda {

// ---- the classifier's logits (cuda_kernels_bf16.cu) ---------------------------------------------

/// The row stride of the bf16 table's logits (its KernelOps::logits_stride): V rounded up to a
/// multiple of 64, as llm.c pads GPT-2's V = 50257 to 50304. The logits are the lm_head GEMMs' D
/// (forward) and A (dx, dW); with an odd V their rows start at every 2-byte offset and cuBLASLt
/// falls back to kernels without 16-byte (tensor-core) loads, which made those three GEMMs, ~30 %
/// of GPT-2 124M's FLOPs, the step's slowest. Aligned rows alone were not enough (an odd GEMM
/// dimension is slow too, measured on an H100), so the classifier's GEMMs run over all `stride`
/// columns against a head padded with zero rows (padded_classifier_scratch_bytes): the forward
/// writes 0 into the padding, the backward (or the fused softmax's gradient pass) zeroes it again
/// before reading it as dlogits, and the softmax never reads it. The rule itself is kernel_ops.h's
/// aligned_logits_stride, which code without the CUDA headers (the memory estimate) sizes the
/// logits by; this name says which table uses it.
inline int padded_logits_stride(int V) { return aligned_logits_stride(V); }

// ---- the Llama family (cuda_llama_ops_bf16.cu) --------------------------------------------------

/// out[rows,C] = weight * (x * rstd), rstd[rows] = 1 / sqrt(mean(x^2) + eps), fp32.
void launch_rmsnorm_forward_bf16(CudaContext& ctx, bf16* out, float* rstd, const bf16* x, const bf16* weight,
                                 int rows, int C, double eps);
/// dx += ... (read, added in fp32, rounded once), dweight += column sums (fp32, deterministic).
void launch_rmsnorm_backward_bf16(CudaContext& ctx, bf16* dx, float* dweight, const bf16* dout, const bf16* x,
                                  const bf16* weight, const float* rstd, int rows, int C);
/// RoPE in place on x[B,T,heads,hs] with fp32 cos, sin [T, hs/2]; `inverse` rotates by -angle.
void launch_rotary_bf16(CudaContext& ctx, bf16* x, const float* cos, const float* sin, int B, int T, int heads,
                        int hs, bool inverse);
/// out = silu(gate) * up.
void launch_swiglu_forward_bf16(CudaContext& ctx, bf16* out, const bf16* gate, const bf16* up, size_t n);
/// dgate, dup (overwritten) from dout.
void launch_swiglu_backward_bf16(CudaContext& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                                 const bf16* up, size_t n);

// ---- attention (cuda_attention_bf16.cu) ---------------------------------------------------------
// att is lse[B,NH,Tq] (fp32, natural log), the table's attention_saves_lse contract: flash
// attention on tensor cores where it applies (cuda_flash_attention.h), widened fp32 elsewhere.

/// GPT-2's causal attention: out[B,T,C] and lse[B,NH,T] from the packed qkv[B,T,3C].
void launch_attention_forward_bf16(CudaContext& ctx, bf16* out, float* att, const bf16* qkv, int B, int T, int C,
                                   int NH);
/// dqkv (overwritten) from dout, the forward's out, qkv and the saved lse.
void launch_attention_backward_bf16(CudaContext& ctx, bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                                    const float* att, int B, int T, int C, int NH);
/// Grouped-query attention: out[B,Tq,NH,hs] and lse[B,NH,Tq] from q, k, v.
void launch_gqa_attention_forward_bf16(CudaContext& ctx, bf16* out, float* att, const bf16* q, const bf16* k,
                                       const bf16* v, int B, int Tq, int Tk, int NH, int NKV, int hs);
/// dq, dk, dv (overwritten) for Tq = Tk = T.
void launch_gqa_attention_backward_bf16(CudaContext& ctx, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                        const bf16* out, const bf16* q, const bf16* k, const bf16* v,
                                        const float* att, int B, int T, int NH, int NKV, int hs);

}  // namespace zt::cuda
