// One Llama-family block's forward, shared by training (LlamaModel: keys and values of the whole
// sequence) and generation (LlamaDecoder: keys and values appended to a cache).
#pragma once

#include "backend/kernel_ops.h"
#include "config/model_config.h"
#include "model/llama_layout.h"

namespace zt {

/// What one block's forward writes, and its backward reads. k and v are where this call's keys
/// and values go: rows [past, past + T) of the sequence whose keys start at k_all / v_all.
template <typename T>
struct LlamaBlockActs {
  T *xn1, *rstd1, *q, *k, *v, *att, *atty, *res2, *xn2, *rstd2, *gate, *up, *h;
  const T *k_all, *v_all;
};

/// out[B,T,C] = block(x) for positions [past, past + T); cos and sin are the tables from
/// position 0 (rope.h). Training passes past = 0 and k_all = k.
template <typename T>
void llama_block_forward(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                         const T* x, T* out, const LlamaBlockActs<T>& a, int B, int T_, int past, const T* cos,
                         const T* sin);

}  // namespace zt
