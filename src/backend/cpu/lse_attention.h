// Causal attention that saves only each row's logsumexp (KernelOps::attention_saves_lse, as flash
// attention does): O(T) memory where the probabilities take O(T^2). The backward recomputes each
// probability from its row's logsumexp and takes D = rowsum(dout * out) from the forward's output,
// as FlashAttention-2 does. Its products run as GEMMs on blocks of 64 queries (lse_attention.cpp),
// where the fp32 kernels' attention loops over one query and one key at a time. fp32 on host
// memory, for the CPU's bf16 table (bf16_kernels.cpp), which widens a sequence's q, k and v at a
// time.
#pragma once

#include <cstddef>

namespace zt::cpu {

/// Causal grouped-query attention's shape: q [B, Tq, NH, hs], k and v [B, Tk, NKV, hs] with
/// Tk >= Tq (query i sits at position Tk - Tq + i), each token's row `q_row`, `kv_row` or `out_row`
/// elements after the last (GPT-2's packed qkv: 3C for q, k and v, C for out); query head h reads
/// kv head h / (NH / NKV).
struct AttentionShape {
  int B, Tq, Tk, NH, NKV, hs;
  size_t q_row, kv_row, out_row;
};

/// out (rows of out_row) and lse [B, NH, Tq]: the natural log of each row's sum of exponentials
/// of its scaled, masked scores.
void lse_attention_forward(const AttentionShape& s, float* out, float* lse, const float* q, const float* k,
                           const float* v);
/// dq, dk, dv (overwritten; the rows of q, k and v) from dout and the forward's out (rows of
/// out_row) and lse; training's shape (Tq = Tk).
void lse_attention_backward(const AttentionShape& s, float* dq, float* dk, float* dv, const float* dout,
                            const float* out, const float* q, const float* k, const float* v, const float* lse);

}  // namespace zt::cpu
