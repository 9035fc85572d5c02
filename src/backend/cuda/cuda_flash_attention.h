// Flash attention for the CUDA KernelOps<bf16> (cuda_flash_attention.cu), called from
// cuda_attention_bf16.cu: causal, grouped-query, bf16 on tensor cores with fp32 accumulation and
// O(T) memory (the forward saves the logsumexp of each query row, the backward recomputes the
// probabilities from it). Head sizes 64 and 128; cuda_attention_bf16.cu falls back to the widened
// fp32 kernels for anything else, with the two fp32 helpers at the end of this header keeping the
// logsumexp contract there. Every launch is on ctx.compute and never synchronises the host.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"

namespace zt::cuda {

/// Where the heads of one attention call sit, in elements. Head h of query token t in batch b
/// starts at q + (b Tq + t) q_token + h hs (dq and dout likewise, dout with o_token); key/value
/// token t of kv head g at k + (b Tk + t) kv_token + g hs (v, dk, dv likewise); query head h reads
/// kv head h / (NH / NKV); query i sits at position Tk - Tq + i and sees keys 0..that position.
struct AttentionLayout {
  int B = 0, NH = 0, NKV = 0, Tq = 0, Tk = 0, hs = 0;
  size_t q_token = 0, kv_token = 0, o_token = 0;
};

/// GPT-2's packed qkv[B,T,3C] (q, k, v of head h at columns h hs, C + h hs, 2C + h hs of a row)
/// and out[B,T,C]: pass q = qkv, k = qkv + C, v = qkv + 2C.
AttentionLayout packed_attention_layout(int B, int T, int C, int NH);
/// The Llama family's q[B,Tq,NH,hs], k and v [B,Tk,NKV,hs], out[B,Tq,NH,hs].
AttentionLayout gqa_attention_layout(int B, int Tq, int Tk, int NH, int NKV, int hs);

/// True when the flash kernels take this call: head size 64 or 128, NH a multiple of NKV,
/// Tk >= Tq, every pointer 16-byte aligned and every token stride a multiple of 8 elements.
bool flash_attention_supported(const AttentionLayout& l, std::initializer_list<const void*> pointers);
/// Why flash_attention_supported(l, pointers) is false, in words for a log line ("head size 48;
/// flash takes 64 or 128", "q, k not 16-byte aligned"); "" where it is true. names[i] names
/// pointers[i] ("a tensor" where names is shorter).
std::string flash_attention_unsupported_reason(const AttentionLayout& l, std::initializer_list<const void*> pointers,
                                               std::initializer_list<const char*> names);

/// out (bf16, o_token) and lse[B,NH,Tq] (fp32, natural log of each row's sum of exp(scale q.k)
/// over its causal keys, scale 1/sqrt(hs)). Needs no scratch.
void launch_flash_attention_forward(CudaContext& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                                    const bf16* v, const AttentionLayout& l);
/// dq, dk, dv (bf16, overwritten) from dout and the forward's out and lse, for Tq = Tk.
/// Deterministic (no atomics). One ctx.scratch call: B*NH*Tq floats.
void launch_flash_attention_backward(CudaContext& ctx, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                     const bf16* out, const bf16* q, const bf16* k, const bf16* v, const float* lse,
                                     const AttentionLayout& l);

// ---- the fallback's fp32 helpers (any head size; q and k widened to fp32, same layout) ----------

/// lse[B,NH,Tq] from fp32 q and k: one warp per query row.
void launch_attention_lse_f32(CudaContext& ctx, float* lse, const float* q, const float* k,
                              const AttentionLayout& l);
/// The probabilities probs[B,NH,Tq,Tk] = exp(scale q.k - lse) (exact zeros past each row's
/// position), the att the fp32 backward kernels read, rebuilt from fp32 q, k and the saved lse.
void launch_attention_probs_from_lse_f32(CudaContext& ctx, float* probs, const float* q, const float* k,
                                         const float* lse, const AttentionLayout& l);

}  // namespace zt::cuda
