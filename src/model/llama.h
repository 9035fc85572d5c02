// The Llama family (Llama, Mistral, Qwen2): token embedding without positions, pre-RMSNorm blocks
// with rotary grouped-query attention and a SwiGLU MLP, a final RMSNorm and an lm_head that is
// tied to the embedding or a parameter of its own. Forward, backward, and per-block activation
// checkpointing, as Gpt2Model.
#pragma once

#include "model/causal_lm.h"
#include "model/llama_block.h"
#include "model/llama_layout.h"

namespace zt {

template <typename T>
class LlamaModel final : public CausalLM<T> {
 public:
  LlamaModel(const LlamaLayout& layout, Backend& backend, KernelOps<T>& ops, int max_batch, int max_seq_len,
             bool activation_checkpointing, int classifier_chunk = 0);

  void forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
               double loss_weight = 1.0, std::optional<double> backward_scale = std::nullopt) override;
  void backward(ParamSource<T>& params, double dloss_scale) override;
  size_t activation_bytes() const override;
  double flops_per_token_forward(int seq_len) const override;

 private:
  using G = GradOf<T>;
  using S = StatOf<T>;
  LlamaBlockActs<T> block_acts(int layer);
  void block_backward(const T* w, G* g, const T* x, const LlamaBlockActs<T>& a, T* dres, int B, int T_,
                      bool recomputed);
  /// The gradients of a projection at block offsets (weight, bias).
  void project_backward(T* dx, G* g, const T* dout, const T* x, const T* w, size_t weight, size_t bias, int rows,
                        int in, int out_dim, bool accumulate_dx);

  using CausalLM<T>::backend_, CausalLM<T>::ops_, CausalLM<T>::batch_, CausalLM<T>::seq_, CausalLM<T>::inputs_,
      CausalLM<T>::targets_, CausalLM<T>::loss_sum_;

  const LlamaLayout& layout_;
  bool checkpointing_;
  int q_dim_, kv_dim_;  // NH x head size, NKV x head size
  size_t per_block_elems_ = 0, per_block_stats_ = 0;

  DeviceArray<T> block_inputs_;  // (L + 1) x [B T C]: each block's input, and the final output
  DeviceArray<T> acts_;          // L blocks (or 1 with checkpointing) x per_block_elems_
  DeviceArray<S> act_stats_;     // L blocks (or 1) x per_block_stats_: rstd, attention
  DeviceArray<T> lnf_, logits_;
  DeviceArray<S> lnf_rstd_, losses_, rope_cos_, rope_sin_;
  DeviceArray<T> dres_, dln_, datty_, dq_, dk_, dv_, dh_, dgate_, dup_;
  DeviceArray<T> xn_;  // the block's norm output (either norm), recomputed in the backward
};

}  // namespace zt
