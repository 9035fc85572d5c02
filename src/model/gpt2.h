// GPT-2: learned positions, pre-LN blocks, tied lm_head, tanh GELU. Forward, backward, and
// per-block activation checkpointing (keep only each block's input; recompute in backward).
// T is the compute type: float in training, double in the gradient checks.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device_array.h"
#include "backend/kernel_ops.h"
#include "model/gpt2_layout.h"
#include "model/param_source.h"

namespace zt {

template <typename T>
class Gpt2Model {
 public:
  /// Activations are allocated once for batches of up to max_batch sequences of max_seq_len.
  Gpt2Model(const Gpt2Layout& layout, Backend& backend, KernelOps<T>& ops, int max_batch, int max_seq_len,
            bool activation_checkpointing);

  /// Runs the model on inputs[B,T] (host memory; uploaded through the backend) and adds
  /// `loss_weight` x the mean cross-entropy over positions whose target is >= 0 to the loss
  /// accumulated on the device. Keeps what backward needs.
  void forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
               double loss_weight = 1.0);
  /// The loss accumulated by the forwards since the last call, read from the device (the host
  /// waits for the compute stream here, once per step), and restarts the accumulation.
  double take_loss();

  /// Backpropagates `dloss_scale` x d(mean loss) of the last forward into the parameter
  /// gradients (accumulated through the ParamSource).
  void backward(ParamSource<T>& params, double dloss_scale);

  /// Positions with a target (>= 0) in the last forward: the mean loss's denominator.
  int64_t last_prediction_count() const { return int64_t(loss_count_); }
  /// Bytes of activation and scratch memory this model holds.
  size_t activation_bytes() const;
  /// Forward FLOPs per token (matmuls + attention), for the GFLOP/s figure: 6x this per
  /// trained token counts forward and backward, plus 2x more with checkpointing's recompute.
  double flops_per_token_forward(int seq_len) const;

 private:
  struct BlockActs {  // what one block's backward needs
    T *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu;
  };
  BlockActs block_acts(int layer);
  void block_forward(const T* w, const T* x, T* out, const BlockActs& a, int B, int T_);
  void block_backward(const T* w, T* g, const T* x, const BlockActs& a, T* dres, int B, int T_);

  /// Copies a batch's tokens to the device through pinned staging, once the previous upload
  /// no longer reads the staging.
  void upload_tokens(const int32_t* inputs, const int32_t* targets, size_t n);

  const Gpt2Layout& layout_;
  Backend& backend_;
  KernelOps<T>& ops_;
  int max_batch_, max_seq_len_;
  bool checkpointing_;
  int batch_ = 0, seq_ = 0;  // the shape of the last forward
  size_t per_block_elems_ = 0;
  double loss_count_ = 0;

  DeviceArray<int32_t> inputs_, targets_;            // the last batch, on the device
  DeviceArray<int32_t> inputs_staging_, targets_staging_;  // pinned
  std::unique_ptr<Event> uploaded_;                   // the staging is free again
  DeviceArray<double> loss_sum_;                      // device: the forwards' weighted mean losses
  DeviceArray<double> loss_host_;                     // pinned: where take_loss reads it

  DeviceArray<T> block_inputs_;  // (L + 1) x [B T C]: each block's input, and the final output
  DeviceArray<T> acts_;          // L blocks (or 1 with checkpointing) x per_block_elems_
  DeviceArray<T> lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  DeviceArray<T> dres_, dln_, dqkv_, datty_, dfch_, dfch_gelu_;
};

}  // namespace zt
