// One Llama-family block's forward, for training (LlamaModel: keys and values of the whole
// sequence, llama_block_forward) and generation (LlamaDecoder: several sequences' tokens, keys and
// values appended to each one's cache, llama_block_decode).
#pragma once

#include <vector>

#include "backend/kernel_ops.h"
#include "config/model_config.h"
#include "model/llama_layout.h"

namespace zt {

/// What one block's forward writes, and its backward reads: k and v hold training's keys and
/// values (generation writes its own into its cache, llama_block_decode). The norm statistics and
/// attention probabilities are StatOf<T> (fp32 in a bf16 model).
template <typename T>
struct LlamaBlockActs {
  T *xn1, *q, *k, *v, *atty, *res2, *xn2, *gate, *up, *h;
  StatOf<T> *rstd1, *att, *rstd2;
};

/// Carves one block's arrays for `rows` tokens out of p, and its statistics out of ps (each
/// advanced past what it gave; they may be the same pointer when the types are), the attention
/// probabilities taking att_elems; k and v only when `with_kv` (generation keeps them in its cache).
/// Given `norm_out` (rows x C) and `mlp_hidden` (rows x I), both norm outputs and the SwiGLU
/// product go there instead of into p: training shares them between blocks and recomputes them.
template <typename T>
LlamaBlockActs<T> carve_llama_block_acts(T*& p, StatOf<T>*& ps, const ModelConfig& cfg, size_t rows,
                                         size_t att_elems, bool with_kv, T* norm_out = nullptr,
                                         T* mlp_hidden = nullptr) {
  const size_t C = size_t(cfg.n_embd), I = size_t(cfg.intermediate_size);
  const size_t q = size_t(cfg.n_head) * size_t(cfg.head_size()), kv = size_t(cfg.n_kv_head) * size_t(cfg.head_size());
  auto take = [](auto*& from, size_t n) {
    auto* out = from;
    from += n;
    return out;
  };
  LlamaBlockActs<T> a{};
  a.xn1 = norm_out ? norm_out : take(p, rows * C);
  a.q = take(p, rows * q);
  if (with_kv) {
    a.k = take(p, rows * kv);
    a.v = take(p, rows * kv);
  }
  a.atty = take(p, rows * q);
  a.res2 = take(p, rows * C);
  a.xn2 = norm_out ? norm_out : take(p, rows * C);
  a.gate = take(p, rows * I);
  a.up = take(p, rows * I);
  a.h = mlp_hidden ? mlp_hidden : take(p, rows * I);
  a.rstd1 = take(ps, rows);
  a.att = take(ps, att_elems);
  a.rstd2 = take(ps, rows);
  return a;
}

/// out[B,T,C] = block(x) for positions [0, T); cos and sin are the tables from position 0
/// (rope.h). out may be x, but no array of `a`: the residual projections add a.res2 into it.
template <typename T>
void llama_block_forward(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                         const T* x, T* out, const LlamaBlockActs<T>& a, int B, int T_, const StatOf<T>* cos,
                         const StatOf<T>* sin);

/// One sequence's rows in a generation pass (llama_block_decode): where its keys and values go.
template <typename T>
struct LlamaDecodeSegment {
  int position;      ///< its first row's position in its sequence
  int tokens;        ///< its rows: the pass's next `tokens` rows, at positions [position, position + tokens)
  T *k_all, *v_all;  ///< the sequence's cache: its keys and values from position 0
};

/// Several sequences' tokens in one pass (generation: a prompt's chunk beside other sequences'
/// next tokens): the segments' rows one after another in x. The norms, the q projection and
/// everything after the attention run over all rows together; each segment's keys and values are
/// projected straight into its cache rows, and its rows attend causally to its own cache. Each
/// segment's rows are what llama_block_forward over its whole sequence gives at their positions,
/// but for the matrix products' rounding; with batch-invariant kernels
/// (KernelOps::set_batch_invariant) a segment's rows do not depend on the other segments. a.att
/// holds one segment's probabilities at a time.
template <typename T>
void llama_block_decode(KernelOps<T>& ops, const ModelConfig& cfg, const LlamaBlockOffsets& o, const T* w,
                        const T* x, T* out, const LlamaBlockActs<T>& a,
                        const std::vector<LlamaDecodeSegment<T>>& segments, const StatOf<T>* cos,
                        const StatOf<T>* sin);

}  // namespace zt
