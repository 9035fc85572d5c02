// The compute kernels the model and optimizer need, one signature per op (as ggml's op table).
// T is the activation dtype: what the activations, their gradients and the weights' working
// copies are stored in. Every backend implements KernelOps<float> and KernelOps<bf16> (a bf16
// model: DeepSpeed's bf16 mode, PyTorch's bf16 autocast); the CPU backend also implements
// KernelOps<double>, which the gradient checks use (central differences need double precision).
// In KernelOps<bf16> every op reads bf16, computes in fp32 and rounds its output to bf16 once,
// while what the numerics need in fp32 stays fp32 (KernelTypes): parameter gradients (GEMMs
// accumulate them in fp32), norm statistics, attention probabilities, losses, rotary tables.
//
// Conventions: row-major; "rows" = batch x time (BT); C = channels. matmul_* weights use HF GPT-2
// Conv1D layout [in, out]; linear_* weights use nn.Linear's [out, in] (the Llama family, lm_heads). Backward ops ACCUMULATE into parameter gradients (+=), so that gradient
// accumulation and tied embeddings need no extra buffers; activation gradients are overwritten
// unless the op says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace zt {

/// The types beside the activation type T: G for parameter gradients, S for the statistics a
/// forward saves (norm means and rstd, attention probabilities, per-row losses, rotary tables).
template <typename T>
struct KernelTypes {
  using Grad = T;
  using Stat = T;
};
template <>
struct KernelTypes<bf16> {
  using Grad = float;
  using Stat = float;
};
template <typename T>
using GradOf = typename KernelTypes<T>::Grad;
template <typename T>
using StatOf = typename KernelTypes<T>::Stat;

/// V rounded up to a multiple of 64: a logits row stride at which every bf16 or fp32 row starts
/// 16-byte aligned, as tensor-core GEMMs want their leading dimension (llm.c pads GPT-2's 50257
/// to 50304 for the same reason). The CUDA bf16 table's logits_stride.
inline int aligned_logits_stride(int V) { return (V + 63) / 64 * 64; }

/// The device scratch the CUDA bf16 table's classifier takes when V is not a multiple of 64 (0
/// when it is): the head padded with zero rows to aligned_logits_stride(V), in bf16, so that the
/// lm_head's forward and dx GEMMs run with a vocabulary dimension that is a multiple of 64 (with
/// GPT-2's odd V cuBLASLt picks kernels 5-7x slower, even with aligned leading dimensions), then the fp32 dhead
/// of the last 64-row tile, 256-byte aligned after it. The memory estimate counts it.
inline size_t padded_classifier_scratch_bytes(int V, int C) {
  const size_t stride = size_t(aligned_logits_stride(V));
  if (stride == size_t(V)) return 0;
  const size_t head_bytes = (stride * size_t(C) * 2 + 255) / 256 * 256;
  return head_bytes + 64 * size_t(C) * sizeof(float);
}

/// KernelOps::weight_packs's request for a range of weights.
enum class WeightPacks {
  kKeep,   ///< the bytes in the range stay as they are, in place, until kStale or kDrop
  kStale,  ///< they changed: every pack of the range is made again at its next use
  kDrop,   ///< the range is given up: its packs are freed
};

template <typename T>
class KernelOps {
 public:
  using G = GradOf<T>;
  using S = StatOf<T>;
  virtual ~KernelOps() = default;

  /// out[BT,C] = wte[tokens] + wpe[t]; wpe may be null (no learned positions: the Llama family)
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                                 int C) = 0;
  /// dwte[tokens] += dout; dwpe[t] += dout (summed over the batch; skipped when dwpe is null)
  virtual void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int B, int T_,
                                  int C) = 0;

  /// out = (x - mean) * rstd * weight + bias per row; saves mean and rstd for backward.
  virtual void layernorm_forward(T* out, S* mean, S* rstd, const T* x, const T* weight, const T* bias,
                                 int rows, int C, double eps) = 0;
  /// dx += ..., dweight += ..., dbias += ...
  virtual void layernorm_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight,
                                  const S* mean, const S* rstd, int rows, int C) = 0;

  /// out[rows,out_dim] = x[rows,in_dim] @ weight[in_dim,out_dim] + bias (bias may be null)
  virtual void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                              int out_dim) = 0;
  /// dx = dout @ weight^T (overwrites; skipped when dx is null); dweight += x^T @ dout;
  /// dbias += column sums of dout (when dbias is not null)
  virtual void matmul_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight,
                               int rows, int in_dim, int out_dim) = 0;

  /// What attention_forward and gqa_attention_forward save for their backward in `att`: false, the
  /// probabilities att[B,NH,Tq,Tk]; true, only the logsumexp of each row's scaled, masked scores,
  /// att[B,NH,Tq] (flash attention: O(T) memory, the backward recomputes the probabilities).
  virtual bool attention_saves_lse() const { return false; }

  /// Causal multi-head attention. qkv[B,T,3C] -> out[B,T,C]; saves att (attention_saves_lse).
  virtual void attention_forward(T* out, S* att, const T* qkv, int B, int T_, int C, int NH) = 0;
  /// dqkv (overwritten) from dout, using the saved att and qkv, and the forward's out[B,T,C] (flash
  /// attention takes D = rowsum(dout * out) from it, as FlashAttention-2 does, rather than
  /// recomputing the forward; kernels that keep the probabilities do not read it).
  virtual void attention_backward(T* dqkv, const T* dout, const T* out, const T* qkv, const S* att, int B, int T_,
                                  int C, int NH) = 0;

  /// out = gelu_tanh(x), elementwise
  virtual void gelu_forward(T* out, const T* x, size_t n) = 0;
  /// dx = dout * gelu_tanh'(x) (overwrites; dx may be dout: elementwise, in place)
  virtual void gelu_backward(T* dx, const T* x, const T* dout, size_t n) = 0;

  /// out = a + b
  virtual void residual_forward(T* out, const T* a, const T* b, size_t n) = 0;
  /// acc += x
  virtual void accumulate(T* acc, const T* x, size_t n) = 0;

  // ---- a GEMM with its neighbour: one op, so that a table can fuse them (cuBLASLt's epilogues on
  // the GPU: the GEMM's output is then not read back by a kernel of its own). Each default is the
  // two ops it replaces, in order, with their roundings: the CPU's results do not change.

  /// out = x @ weight + bias + residual: matmul_forward, then accumulate(out, residual) (a
  /// residual branch's output projection). out overlaps neither residual nor x.
  virtual void matmul_forward_residual(T* out, const T* x, const T* weight, const T* bias, const T* residual,
                                       int rows, int in_dim, int out_dim) {
    matmul_forward(out, x, weight, bias, rows, in_dim, out_dim);
    accumulate(out, residual, size_t(rows) * size_t(out_dim));
  }
  /// pre = x @ weight + bias, out = gelu_tanh(pre): matmul_forward, then gelu_forward. pre is
  /// what the backward's matmul_backward_gelu reads.
  virtual void matmul_gelu_forward(T* pre, T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                                   int out_dim) {
    matmul_forward(pre, x, weight, bias, rows, in_dim, out_dim);
    gelu_forward(out, pre, size_t(rows) * size_t(out_dim));
  }
  /// matmul_backward of a GEMM whose input x = gelu_tanh(gelu_pre), with the GELU's backward
  /// folded into dx: dx = gelu_tanh'(gelu_pre) * (dout @ weight^T), i.e. d(gelu_pre) (never null
  /// here); dweight += x^T @ dout; dbias += column sums of dout (when not null). dx overlaps none
  /// of gelu_pre, x and dout.
  virtual void matmul_backward_gelu(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight,
                                    const T* gelu_pre, int rows, int in_dim, int out_dim) {
    matmul_backward(dx, dweight, dbias, dout, x, weight, rows, in_dim, out_dim);
    gelu_backward(dx, gelu_pre, dx, size_t(rows) * size_t(in_dim));
  }

  /// logits[rows,V] @ -> probabilities in place; losses[row] = -log p[target]. Targets < 0 are
  /// ignored (loss 0). Adds weight x (the sum of the losses) to *loss_sum, a device double: the
  /// loss stays on the device until the host reads it once per step.
  virtual void softmax_xent_forward(T* logits_to_probs, S* losses, const int32_t* targets, int rows, int V,
                                    double* loss_sum, double weight) = 0;
  /// probs -> dlogits in place: (p - onehot) * dloss (dloss is d(total loss)/d(each row's loss)).
  virtual void softmax_xent_backward(T* probs_to_dlogits, const int32_t* targets, int rows, int V,
                                     double dloss) = 0;

  // ---- the classifier: the lm_head GEMM and the loss together --------------------------------

  /// The row stride, in elements, of the logits the classifier ops read and write: V, or V rounded
  /// up so that every row starts 16-byte aligned (a tensor-core GEMM's leading dimension; GPT-2's
  /// V = 50257 is odd). The caller allocates rows x logits_stride(V).
  virtual int logits_stride(int V) const { return V; }
  /// logits[rows, V] (row stride logits_stride(V)) = x[rows, C] @ head[V, C]^T, then
  /// softmax_xent_forward on them in place: probabilities, losses, the weighted loss sum.
  virtual void classifier_forward(T* logits, S* losses, const T* x, const T* head, const int32_t* targets, int rows,
                                  int C, int V, double* loss_sum, double weight) {
    linear_forward(logits, x, head, nullptr, rows, C, V);
    softmax_xent_forward(logits, losses, targets, rows, V, loss_sum, weight);
  }
  /// Its backward from the saved probabilities: dlogits in place (softmax_xent_backward), then
  /// dx = dlogits @ head (overwritten), dhead += dlogits^T @ x.
  virtual void classifier_backward(T* dx, G* dhead, T* logits, const T* x, const T* head, const int32_t* targets,
                                   int rows, int C, int V, double dloss) {
    softmax_xent_backward(logits, targets, rows, V, dloss);
    linear_backward(dx, dhead, nullptr, logits, x, head, rows, C, V, false);
  }
  /// classifier_forward then classifier_backward on the same rows, for a backward known in the
  /// forward (CausalLM's chunked classifier): the same results, bit for bit; a table may write
  /// the logits' gradient in the softmax's pass instead of storing the probabilities and reading
  /// them back.
  virtual void classifier_forward_backward(T* dx, G* dhead, T* logits, S* losses, const T* x, const T* head,
                                           const int32_t* targets, int rows, int C, int V, double* loss_sum,
                                           double weight, double dloss) {
    classifier_forward(logits, losses, x, head, targets, rows, C, V, loss_sum, weight);
    classifier_backward(dx, dhead, logits, x, head, targets, rows, C, V, dloss);
  }

  /// The dtype GEMM inputs (matmul_*, linear_*) are rounded to: kF32 (the default) or kBF16
  /// (DeepSpeed's bf16 mode runs its matmuls in bf16: inputs rounded to bf16, products summed
  /// and written in fp32). Returns the dtype the table will use: one without fast bf16 GEMMs
  /// (no bf16 instructions, or fp64) keeps fp32, since there bf16 would only add conversions.
  virtual DType set_matmul_dtype(DType dtype) {
    (void)dtype;
    return DType::kF32;
  }

  /// Weight packs: a table whose GEMMs want their weight operand in a layout of their own (the
  /// CPU's oneDNN bf16 GEMMs: a blocked layout that they otherwise copy the weight into on every
  /// call, on every thread) may keep each weight that lies in [lo, hi) in that layout from one
  /// call to the next, for its forward and its backward's dx. The caller vouches for the bytes
  /// (kKeep) until it says they changed (kStale) or gives the range up (kDrop); the ZeRO engine
  /// does at stages 0-2, where a bf16 model reads the bf16 parameters in place and only the step
  /// or a load writes them. Returns whether the table keeps packs for the range; a table without
  /// such GEMMs keeps none. The packs count in the device pool.
  virtual bool weight_packs(const void* lo, const void* hi, WeightPacks what) {
    (void)lo, (void)hi, (void)what;
    return false;
  }

  /// fp32 GEMMs on TF32 tensor cores when `allow` (HF's --tf32; PyTorch's allow_tf32): returns
  /// whether this table has them (the CUDA fp32 table). Elsewhere fp32 GEMMs stay exact fp32.
  virtual bool set_allow_tf32(bool allow) {
    (void)allow;
    return false;
  }

  /// Batch invariance when `on`: matmul_forward and linear_forward (and the ops built on them)
  /// sum every output element in one fixed order, so each output row's bits depend only on its
  /// own input row and the weights, never on how many rows run together, the row's place among
  /// them or the thread count. A library GEMM picks its kernels and split by the shape, so
  /// without this a sequence decoded beside others is rounded differently from alone. The
  /// decoder turns it on (generation: same ids batched as alone). Returns whether the table
  /// keeps it; turning it off always succeeds. Backward GEMMs are unaffected.
  virtual bool set_batch_invariant(bool on) { return !on; }

  /// out[rows,out_dim] = x[rows,in_dim] @ weight[out_dim,in_dim]^T + bias: HF's nn.Linear (bias may
  /// be null). The tied GPT-2 lm_head is one too: weight = wte[V,C].
  virtual void linear_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                              int out_dim) = 0;
  /// dx = dout @ weight (overwrites, or adds when accumulate_dx: q, k and v projections read the same
  /// input); dweight += dout^T @ x; dbias += column sums of dout (when dbias is not null).
  virtual void linear_backward(T* dx, G* dweight, G* dbias, const T* dout, const T* x, const T* weight, int rows,
                               int in_dim, int out_dim, bool accumulate_dx) = 0;
  /// out = x @ weight^T + bias + residual: linear_forward, then accumulate(out, residual) (as
  /// matmul_forward_residual, for nn.Linear's layout). out overlaps neither residual nor x.
  virtual void linear_forward_residual(T* out, const T* x, const T* weight, const T* bias, const T* residual,
                                       int rows, int in_dim, int out_dim) {
    linear_forward(out, x, weight, bias, rows, in_dim, out_dim);
    accumulate(out, residual, size_t(rows) * size_t(out_dim));
  }

  // ---- the Llama family ----------------------------------------------------------------------

  /// out = x / sqrt(mean(x^2) + eps) * weight per row (HF LlamaRMSNorm); saves rstd for backward.
  virtual void rmsnorm_forward(T* out, S* rstd, const T* x, const T* weight, int rows, int C, double eps) = 0;
  /// dx += ..., dweight += ...
  virtual void rmsnorm_backward(T* dx, G* dweight, const T* dout, const T* x, const T* weight, const S* rstd,
                                int rows, int C) = 0;

  /// Rotary position embedding in place on x[B,T,heads,hs], HF's rotate_half pairing (i, i + hs/2):
  /// (x_i, x_j) -> (x_i cos - x_j sin, x_j cos + x_i sin) with cos[t, hs/2] and sin[t, hs/2] the
  /// angles of position t. `inverse` rotates the other way: the gradient of the forward rotation.
  virtual void rotary(T* x, const S* cos, const S* sin, int B, int T_, int heads, int hs, bool inverse) = 0;

  /// Causal grouped-query attention. q[B,Tq,NH,hs]; k, v [B,Tk,NKV,hs] with Tk >= Tq (a KV cache
  /// holds Tk - Tq earlier positions); query head h reads kv head h / (NH / NKV); query i sits at
  /// position Tk - Tq + i. -> out[B,Tq,NH,hs]; saves att (attention_saves_lse).
  virtual void gqa_attention_forward(T* out, S* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk,
                                     int NH, int NKV, int hs) = 0;
  /// dq, dk, dv (overwritten) from dout, using the saved att and the forward's out[B,T,NH,hs] (as
  /// attention_backward; training: Tq = Tk = T_).
  virtual void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* q, const T* k,
                                      const T* v, const S* att, int B, int T_, int NH, int NKV, int hs) = 0;

  /// out = silu(gate) * up, elementwise (HF's LlamaMLP activation)
  virtual void swiglu_forward(T* out, const T* gate, const T* up, size_t n) = 0;
  /// dgate, dup (overwritten) from dout
  virtual void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) = 0;
};

}  // namespace zt
