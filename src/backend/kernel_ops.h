// The compute kernels the model and optimizer need, one signature per op (as ggml's op table).
// Every backend implements KernelOps<float>; the CPU backend also implements KernelOps<double>,
// which the gradient checks use (central differences need double precision).
//
// Conventions: row-major; "rows" = batch x time (BT); C = channels. Weights use HF GPT-2 Conv1D
// layout [in, out]. Backward ops ACCUMULATE into parameter gradients (+=), so that gradient
// accumulation and tied embeddings need no extra buffers; activation gradients are overwritten
// unless the op says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace zt {

template <typename T>
class KernelOps {
 public:
  virtual ~KernelOps() = default;

  /// out[BT,C] = wte[tokens] + wpe[t]
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                                 int C) = 0;
  /// dwte[tokens] += dout; dwpe[t] += dout (summed over the batch)
  virtual void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_,
                                  int C) = 0;

  /// out = (x - mean) * rstd * weight + bias per row; saves mean and rstd for backward.
  virtual void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias,
                                 int rows, int C, double eps) = 0;
  /// dx += ..., dweight += ..., dbias += ...
  virtual void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                                  const T* mean, const T* rstd, int rows, int C) = 0;

  /// out[rows,out_dim] = x[rows,in_dim] @ weight[in_dim,out_dim] + bias (bias may be null)
  virtual void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int rows, int in_dim,
                              int out_dim) = 0;
  /// dx = dout @ weight^T (overwrites; skipped when dx is null); dweight += x^T @ dout;
  /// dbias += column sums of dout (when dbias is not null)
  virtual void matmul_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                               int rows, int in_dim, int out_dim) = 0;

  /// Causal multi-head attention. qkv[B,T,3C] -> out[B,T,C]; saves probabilities att[B,NH,T,T].
  virtual void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) = 0;
  /// dqkv (overwritten) from dout, using the saved att and qkv.
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                                  int NH) = 0;

  /// out = gelu_tanh(x), elementwise
  virtual void gelu_forward(T* out, const T* x, size_t n) = 0;
  /// dx = dout * gelu_tanh'(x) (overwrites)
  virtual void gelu_backward(T* dx, const T* x, const T* dout, size_t n) = 0;

  /// out = a + b
  virtual void residual_forward(T* out, const T* a, const T* b, size_t n) = 0;
  /// acc += x
  virtual void accumulate(T* acc, const T* x, size_t n) = 0;

  /// logits[rows,V] @ -> probabilities in place; losses[row] = -log p[target]. Targets < 0 are
  /// ignored (loss 0). Adds weight x (the sum of the losses) to *loss_sum, a device double: the
  /// loss stays on the device until the host reads it once per step.
  virtual void softmax_xent_forward(T* logits_to_probs, T* losses, const int32_t* targets, int rows, int V,
                                    double* loss_sum, double weight) = 0;
  /// probs -> dlogits in place: (p - onehot) * dloss (dloss is d(total loss)/d(each row's loss)).
  virtual void softmax_xent_backward(T* probs_to_dlogits, const int32_t* targets, int rows, int V,
                                     double dloss) = 0;

  /// out[rows,N] = x[rows,K] @ w[N,K]^T (the tied lm_head: w is wte[V,C])
  virtual void matmul_nt_forward(T* out, const T* x, const T* w, int rows, int K, int N) = 0;
  /// dx = dout @ w (overwrites); dw += dout^T @ x
  virtual void matmul_nt_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, int rows, int K,
                                  int N) = 0;
};

}  // namespace zt
