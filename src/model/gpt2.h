// GPT-2: learned positions, pre-LN blocks, tied lm_head, tanh GELU. Forward, backward, and
// per-block activation checkpointing (keep only each block's input; recompute in backward).
#pragma once

#include "model/causal_lm.h"
#include "model/gpt2_layout.h"

namespace zt {

template <typename T>
class Gpt2Model final : public CausalLM<T> {
 public:
  /// Activations are allocated once for batches of up to max_batch sequences of max_seq_len.
  Gpt2Model(const Gpt2Layout& layout, Backend& backend, KernelOps<T>& ops, int max_batch, int max_seq_len,
            bool activation_checkpointing, int classifier_chunk = 0);

  void forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
               double loss_weight = 1.0, std::optional<double> backward_scale = std::nullopt) override;
  void backward(ParamSource<T>& params, double dloss_scale) override;
  size_t activation_bytes() const override;
  double flops_per_token_forward(int seq_len) const override;

 private:
  using G = GradOf<T>;
  using S = StatOf<T>;
  struct BlockActs {  // what one block's backward needs
    T *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu;
    S *ln1_mean, *ln1_rstd, *att, *ln2_mean, *ln2_rstd;
  };
  BlockActs block_acts(int layer);
  void block_forward(const T* w, const T* x, T* out, const BlockActs& a, int B, int T_);
  void block_backward(const T* w, G* g, const T* x, const BlockActs& a, T* dres, int B, int T_);

  using CausalLM<T>::backend_, CausalLM<T>::ops_, CausalLM<T>::batch_, CausalLM<T>::seq_, CausalLM<T>::inputs_,
      CausalLM<T>::targets_, CausalLM<T>::loss_sum_;

  const Gpt2Layout& layout_;
  bool checkpointing_;
  size_t per_block_elems_ = 0, per_block_stats_ = 0;

  DeviceArray<T> block_inputs_;  // (L + 1) x [B T C]: each block's input, and the final output
  DeviceArray<T> acts_;          // L blocks (or 1 with checkpointing) x per_block_elems_
  DeviceArray<S> act_stats_;     // L blocks (or 1) x per_block_stats_: norm statistics, attention
  DeviceArray<T> lnf_, logits_;
  DeviceArray<S> lnf_mean_, lnf_rstd_, losses_;
  DeviceArray<T> dres_, dln_, dqkv_, datty_, dfch_;
};

}  // namespace zt
