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

/// Carves one block's arrays for `rows` tokens out of p (advanced past them), the attention
/// probabilities taking att_elems; k and v only when `with_kv` (generation keeps them in its cache).
template <typename T>
LlamaBlockActs<T> carve_llama_block_acts(T*& p, const ModelConfig& cfg, size_t rows, size_t att_elems, bool with_kv) {
  const size_t C = size_t(cfg.n_embd), I = size_t(cfg.intermediate_size);
  const size_t q = size_t(cfg.n_head) * size_t(cfg.head_size()), kv = size_t(cfg.n_kv_head) * size_t(cfg.head_size());
  auto take = [&](size_t n) {
    T* out = p;
    p += n;
    return out;
  };
  LlamaBlockActs<T> a{};
  a.xn1 = take(rows * C);
  a.rstd1 = take(rows);
  a.q = take(rows * q);
  if (with_kv) {
    a.k = take(rows * kv);
    a.v = take(rows * kv);
  }
  a.att = take(att_elems);
  a.atty = take(rows * q);
  a.res2 = take(rows * C);
  a.xn2 = take(rows * C);
  a.rstd2 = take(rows);
  a.gate = take(rows * I);
  a.up = take(rows * I);
  a.h = take(rows * I);
  a.k_all = a.k;
  a.v_all = a.v;
  return a;
}

/// out[B,T,C] = block(x) for positions [past, past + T); cos and sin are the tables from
/// position 0 (rope.h). Training passes past = 0 and k_all = k.
template <typename T>
void llama_block_forward(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                         const T* x, T* out, const LlamaBlockActs<T>& a, int B, int T_, int past, const T* cos,
                         const T* sin);

}  // namespace zt
