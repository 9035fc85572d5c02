#include "model/model_memory.h"

#include <algorithm>


namespace zt {

// Gpt2Model. Per block (kept for all L, or for one with checkpointing, which recomputes): ln1,
// qkv, attention output, residual, ln2 (7C per token) and the MLP's two 4C intermediates in one
// array; four layernorm statistics per token and the attention probabilities (H T per token) in
// another. Plus every block's input (one array), ln_f with its statistics, the logits and losses,
// and backward's scratch (10C per token: the MLP's backward takes d(GELU input) straight from
// the fc_proj GEMM, matmul_backward_gelu), each its own array.
Gpt2ActivationArrays gpt2_activation_arrays(const ModelConfig& m, size_t batch, size_t seq_len,
                                            bool gradient_checkpointing, bool attention_lse, size_t logits_stride,
                                            size_t logits_rows) {
  const size_t B = batch, T = seq_len, BT = B * T;
  const size_t C = size_t(m.n_embd), V = size_t(m.vocab_size), H = size_t(m.n_head), L = size_t(m.n_layer);
  Gpt2ActivationArrays a;
  a.per_block = BT * (C + 3 * C + C + C + C + 4 * C + 4 * C);
  a.per_block_stats = 4 * BT + B * H * T * (attention_lse ? 1 : T);
  a.block_inputs = (L + 1) * BT * C;
  a.acts = (gradient_checkpointing ? 1 : L) * a.per_block;
  a.act_stats = (gradient_checkpointing ? 1 : L) * a.per_block_stats;
  a.lnf = BT * C;
  a.lnf_mean = a.lnf_rstd = a.losses = BT;
  a.logits = (logits_rows ? logits_rows : BT) * (logits_stride ? logits_stride : V);
  a.dres = a.dln = a.datty = BT * C;
  a.dqkv = BT * 3 * C;
  a.dfch = BT * 4 * C;
  return a;
}

std::vector<ActivationArray> Gpt2ActivationArrays::arrays() const {
  return {{block_inputs}, {acts}, {act_stats, true}, {lnf}, {lnf_mean, true}, {lnf_rstd, true}, {logits},
          {losses, true}, {dres}, {dln}, {dqkv}, {datty}, {dfch}};
}

// LlamaModel. Per block: q, k and v after the rotary, the attention output, the residual, and
// the MLP's gate and up in one array; the two rstd and the attention probabilities in another.
// The two RMSNorm outputs and the SwiGLU product are not kept per block: each is one cheap pass
// from what is (the norm's input and rstd; gate and up), so the backward recomputes them, bit for
// bit, as PyTorch's compiler does: the norm outputs into one array shared by all blocks (xn), the
// product into backward's dgate scratch, which holds nothing until the product has been used.
// Plus every block's input, the final norm, logits and losses, the rotary tables, and
// backward's scratch, each its own array.
LlamaActivationArrays llama_activation_arrays(const ModelConfig& m, size_t batch, size_t seq_len,
                                              bool gradient_checkpointing, bool attention_lse,
                                              size_t logits_stride, size_t logits_rows) {
  const size_t B = batch, T = seq_len, BT = B * T;
  const size_t C = size_t(m.n_embd), V = size_t(m.vocab_size), H = size_t(m.n_head), L = size_t(m.n_layer);
  const size_t q = H * size_t(m.head_size()), kv = size_t(m.n_kv_head) * size_t(m.head_size());
  const size_t I = size_t(m.intermediate_size);
  LlamaActivationArrays a;
  a.per_block = BT * (q + 2 * kv + q + C + 2 * I);
  a.per_block_stats = 2 * BT + B * H * T * (attention_lse ? 1 : T);
  a.block_inputs = (L + 1) * BT * C;
  a.acts = (gradient_checkpointing ? 1 : L) * a.per_block;
  a.act_stats = (gradient_checkpointing ? 1 : L) * a.per_block_stats;
  a.lnf = BT * C;
  a.lnf_rstd = a.losses = BT;
  a.logits = (logits_rows ? logits_rows : BT) * (logits_stride ? logits_stride : V);
  a.rope_cos = a.rope_sin = T * size_t(m.head_size() / 2);
  a.dres = a.dln = BT * C;
  a.datty = a.dq = BT * q;
  a.dk = a.dv = BT * kv;
  a.dh = a.dgate = a.dup = BT * I;
  a.xn = BT * C;
  return a;
}

std::vector<ActivationArray> LlamaActivationArrays::arrays() const {
  return {{block_inputs}, {acts},  {act_stats, true}, {lnf},           {lnf_rstd, true}, {logits},
          {losses, true}, {rope_cos, true}, {rope_sin, true}, {dres}, {dln}, {datty}, {dq}, {dk}, {dv},
          {dh},           {dgate}, {dup}, {xn}};
}

size_t classifier_logits_rows(size_t rows, size_t row_bytes, int classifier_chunk) {
  if (classifier_chunk > 0) return std::min(rows, size_t(classifier_chunk));
  if (classifier_chunk == 0 || rows * row_bytes <= kClassifierChunkAutoBytes) return rows;
  const size_t fit = row_bytes ? kClassifierChunkAutoBytes / row_bytes / 64 * 64 : rows;
  return std::min(rows, std::max<size_t>(fit, 64));
}

std::vector<size_t> activation_allocations(const ModelConfig& m, size_t batch, size_t seq_len,
                                           bool gradient_checkpointing, DType activation_dtype, bool attention_lse,
                                           size_t logits_stride, size_t logits_rows) {
  const std::vector<ActivationArray> arrays =
      m.architecture() == Architecture::kLlama
          ? llama_activation_arrays(m, batch, seq_len, gradient_checkpointing, attention_lse, logits_stride,
                                    logits_rows)
                .arrays()
          : gpt2_activation_arrays(m, batch, seq_len, gradient_checkpointing, attention_lse, logits_stride,
                                   logits_rows)
                .arrays();
  std::vector<size_t> bytes;
  for (const ActivationArray& a : arrays) {
    bytes.push_back(a.elements * (a.stat ? sizeof(float) : dtype_size(activation_dtype)));
  }
  return bytes;
}

size_t activation_bytes(const ModelConfig& m, size_t batch, size_t seq_len, bool gradient_checkpointing,
                        DType activation_dtype, bool attention_lse, size_t logits_stride, size_t logits_rows) {
  size_t total = 0;
  for (size_t b : activation_allocations(m, batch, seq_len, gradient_checkpointing, activation_dtype, attention_lse,
                                         logits_stride, logits_rows)) {
    total += b;
  }
  return total;
}

// The floats each op of the CPU's bf16 kernels (backend/cpu/bf16_kernels.cpp) widens at once,
// from the same tile plans (bf16_tiles.h), for every op the models run; the arena is the largest.
size_t cpu_bf16_scratch_bytes(const ModelConfig& m, size_t batch, size_t seq_len, size_t logits_rows,
                              size_t budget, bool native_gemm) {
  using cpu::plan_gemm;
  const size_t B = batch, T = seq_len, BT = batch * seq_len, C = size_t(m.n_embd), V = size_t(m.vocab_size);
  const size_t R = logits_rows ? logits_rows : BT;  // the classifier's rows a call
  auto tiles = [&](size_t units, size_t per_unit, size_t fixed) {
    return cpu::tile_floats(units, per_unit, fixed, budget);
  };
  auto elementwise = [&](size_t n, size_t arrays) { return tiles((n + 63) / 64, arrays * 64, 0); };
  // A GEMM over `rows` rows: its forward, its backward's dx and dweight; `conv1d`: GPT-2's weight
  // [in, out], whose gradient has `in` rows, where nn.Linear's [out, in] has `out`.
  std::vector<size_t> ops;
  auto gemm = [&](size_t rows, size_t in, size_t out, bool conv1d) {
    if (native_gemm) return;
    ops.push_back(plan_gemm(rows, out, in, true, budget).floats(true));
    ops.push_back(plan_gemm(rows, in, out, true, budget).floats(true));
    ops.push_back(conv1d ? plan_gemm(in, out, rows, false, budget).floats(false)
                         : plan_gemm(out, in, rows, false, budget).floats(false));
  };
  // The classifier: the lm_head (nn.Linear's layout) over R rows, the softmax and its backward.
  gemm(R, C, V, false);
  ops.push_back(tiles(R, V, 0));
  ops.push_back(elementwise(BT * C, 2));  // a residual add
  if (m.architecture() == Architecture::kLlama) {
    const size_t q = size_t(m.n_head) * size_t(m.head_size()), kv = size_t(m.n_kv_head) * size_t(m.head_size());
    const size_t I = size_t(m.intermediate_size);
    for (auto [in, out] : {std::pair{C, q}, {C, kv}, {q, C}, {C, I}, {I, C}}) gemm(BT, in, out, false);
    ops.insert(ops.end(), {tiles(BT, 2 * C, C), tiles(BT, 3 * C, C),             // RMSNorm, its backward
                           tiles(B, T * q, 0), tiles(B, T * kv, 0),              // the rotary on q and k
                           elementwise(BT * I, 3), elementwise(BT * I, 5)});     // SwiGLU, its backward
    if (!native_gemm) {  // attention and its backward
      ops.insert(ops.end(), {tiles(B, 2 * T * q + 2 * T * kv, 0), tiles(B, 4 * T * q + 4 * T * kv, 0)});
    }
  } else {
    for (auto [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) gemm(BT, in, out, true);
    ops.insert(ops.end(), {tiles(BT, 2 * C, 2 * C), tiles(BT, 3 * C, C),         // LayerNorm, its backward
                           elementwise(BT * 4 * C, 2), elementwise(BT * 4 * C, 3)});  // GELU, its backward
    if (!native_gemm) ops.insert(ops.end(), {tiles(B, 4 * T * C, 0), tiles(B, 8 * T * C, 0)});  // attention
  }
  return *std::max_element(ops.begin(), ops.end()) * sizeof(float);
}

std::vector<size_t> bf16_weight_packs(const ModelConfig& m, const std::function<size_t(int, int)>& pack) {
  const int C = m.n_embd;
  std::vector<std::pair<int, int>> weights{{C, m.vocab_size}};  // [in, out]: the lm_head (tied or not)
  for (int layer = 0; layer < m.n_layer; ++layer) {
    if (m.architecture() == Architecture::kLlama) {
      const int q = m.n_head * m.head_size(), kv = m.n_kv_head * m.head_size(), I = m.intermediate_size;
      weights.insert(weights.end(), {{C, q}, {C, kv}, {C, kv}, {q, C}, {C, I}, {C, I}, {I, C}});
    } else {
      weights.insert(weights.end(), {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}});
    }
  }
  std::vector<size_t> packs;
  for (auto [in, out] : weights) {
    for (size_t bytes : {pack(in, out), pack(out, in)}) {  // the forward's K x N, the dx's
      if (bytes > 0) packs.push_back(bytes);
    }
  }
  return packs;
}

int64_t largest_layer_params(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.n_positions;
  if (m.architecture() == Architecture::kLlama) {
    const int64_t q = int64_t(m.n_head) * m.head_size(), I = m.intermediate_size;
    const int64_t bias = m.attention_bias || m.qkv_bias ? q : 0, mlp_bias = m.mlp_bias ? I : 0;
    return std::max({V * C, C * q + bias, C * I + mlp_bias});
  }
  return std::max({V * C, P * C, 3 * C * C + 3 * C, 4 * C * C + 4 * C, 4 * C * C + C});
}

}  // namespace zt
