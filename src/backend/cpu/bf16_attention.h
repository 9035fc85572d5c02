// Causal attention on bf16 q, k and v as bf16 GEMMs (oneDNN's AVX512-BF16 or AMX kernels through
// Bf16Gemm), saving each row's logsumexp as lse_attention.h does: the CPU's bf16 table on a CPU
// with bf16 GEMMs. The scores and the softmax are fp32; the probabilities (and in the backward
// d(scores)) are rounded to bf16 before they meet V (or K and Q), as a GPU's flash attention
// rounds them; dk and dv sum in fp32 and are rounded once.
//
// oneDNN 2.6's fast kernels take dense operands only (a head's rows strided within a token's row
// send it to a generic GEMM ten times slower), so each task packs its head's rows first: k and v
// once, q (and dout) a block of queries at a time. Each thread runs its own products (Bf16Gemm
// runs serially on the calling thread inside a parallel region); its scratch, O(kBlock x Tk)
// floats and a head's k and v, is its own and not in the pools, as lse_attention's.
#pragma once

#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/lse_attention.h"
#include "core/dtype.h"

namespace zt::cpu {

/// out (rows of out_row) and lse [B, NH, Tq], as lse_attention_forward.
void bf16_attention_forward(Bf16Gemm& gemm, const AttentionShape& s, bf16* out, float* lse, const bf16* q,
                            const bf16* k, const bf16* v);
/// dq, dk, dv (overwritten), as lse_attention_backward; training's shape (Tq = Tk).
void bf16_attention_backward(Bf16Gemm& gemm, const AttentionShape& s, bf16* dq, bf16* dk, bf16* dv,
                             const bf16* dout, const bf16* out, const bf16* q, const bf16* k, const bf16* v,
                             const float* lse);

}  // namespace zt::cpu
