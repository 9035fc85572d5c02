// What the trainer, the engine's tests and the benchmarks see of a model, whatever its
// architecture: forward with a loss, backward into the ParamSource's gradients, and the figures a
// run reports. CausalLM also owns what every architecture shares: the batch's tokens on the
// device (uploaded through pinned staging) and the loss accumulated on the device.
// T is the activation dtype (kernel_ops.h): float or bf16 in training, double in the gradient
// checks. Weights come as T working copies; gradients, losses and statistics are fp32 in bf16.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "backend/device_array.h"
#include "backend/kernel_ops.h"
#include "model/model_layout.h"
#include "model/param_source.h"

namespace zt {

template <typename T>
class CausalLM {
 public:
  using G = GradOf<T>;
  using S = StatOf<T>;

  virtual ~CausalLM() = default;
  CausalLM(const CausalLM&) = delete;
  CausalLM& operator=(const CausalLM&) = delete;

  /// Runs the model on inputs[B,T] (host memory; uploaded through the backend) and adds
  /// `loss_weight` x the mean cross-entropy over positions whose target is >= 0 to the loss
  /// accumulated on the device. Keeps what backward needs. `backward_scale`: the dloss_scale of
  /// the backward that follows, where one does (training): the lm_head's backward then runs here,
  /// chunk by chunk (KernelOps::classifier_forward_backward), so that the logits are written and
  /// read once and only one chunk's are held (logits_rows()); backward then needs that same
  /// scale. Without it (evaluation, or a backward computed from kept logits) a model whose
  /// classifier runs in chunks (logits_rows() < B T) can only be evaluated.
  virtual void forward(ParamSource<T>& params, const int32_t* inputs, const int32_t* targets, int B, int T_,
                       double loss_weight = 1.0, std::optional<double> backward_scale = std::nullopt) = 0;
  /// Backpropagates `dloss_scale` x d(mean loss) of the last forward into the parameter
  /// gradients (accumulated through the ParamSource).
  virtual void backward(ParamSource<T>& params, double dloss_scale) = 0;
  /// Bytes of activation and scratch memory this model holds.
  virtual size_t activation_bytes() const = 0;
  /// Forward FLOPs per token (matmuls + attention), for the GFLOP/s figure: 6x this per
  /// trained token counts forward and backward, plus 2x more with checkpointing's recompute.
  virtual double flops_per_token_forward(int seq_len) const = 0;

  /// The loss accumulated by the forwards since the last call, read from the device (the host
  /// waits for the compute stream here, once per step), and restarts the accumulation.
  double take_loss();
  /// Positions with a target (>= 0) in the last forward: the mean loss's denominator.
  int64_t last_prediction_count() const { return int64_t(loss_count_); }
  /// The rows of logits held at once (classifier_logits_rows): the classifier's chunk.
  int logits_rows() const { return logits_rows_; }

 protected:
  /// `classifier_chunk`: --classifier_chunk_tokens (kClassifierChunkAuto, 0 or rows), resolved
  /// against the vocabulary and the kernels' logits stride.
  CausalLM(Backend& backend, KernelOps<T>& ops, int max_batch, int max_seq_len, int vocab_size,
           int classifier_chunk);
  /// Checks the shape against the allocation, uploads the tokens and counts the targets.
  void start_forward(const int32_t* inputs, const int32_t* targets, int B, int T_);
  /// The loss's weight per position for the last forward (the mean's 1 / count).
  double per_position(double weight) const { return loss_count_ > 0 ? weight / loss_count_ : 0.0; }

  // What every architecture's end looks like: the final norm's output `normed` [BT, C] through the
  // lm_head (weights [V, C] in `head_unit`) to logits [logits_rows(), V] (row stride
  // KernelOps::logits_stride) and the cross-entropy, through the kernels' classifier ops.
  /// logits = normed head^T, then loss_weight x the mean cross-entropy into the loss sum, over the
  /// rows in chunks of logits_rows(). With a backward to follow (backward_scale), each chunk's
  /// backward with it: the head's gradient accumulated (its accumulator opened here), d(normed)
  /// into `dnormed`.
  void head_forward(ParamSource<T>& params, int head_unit, const T* normed, T* logits, S* losses, T* dnormed, int C,
                    int V, double loss_weight, std::optional<double> backward_scale);
  /// Its backward (where head_forward did not run it): d(logits) in place, the head's gradient
  /// accumulated, d(normed) into `dnormed`. The head's unit finishes here unless it is the
  /// embedding's (tied): then the caller finishes it after embedding_backward, into the
  /// accumulator returned.
  G* head_backward(ParamSource<T>& params, int head_unit, int embedding_unit, const T* normed, T* logits, T* dnormed,
                   int C, int V, double dloss_scale);
  /// The blocks' backward, last to first: block_unit(l)'s weights acquired and its gradient
  /// accumulator open around block(l, weights, grads), which recomputes what checkpointing dropped
  /// and backpropagates; the unit's gradients finish after it.
  template <typename UnitOf, typename Block>
  void blocks_backward(ParamSource<T>& params, int n_layer, UnitOf block_unit, Block block) {
    for (int l = n_layer - 1; l >= 0; --l) {
      const int unit = block_unit(l);
      const T* w = params.acquire_weights(unit);
      G* g = params.grad_accumulator(unit);
      block(l, w, g);
      params.release_weights(unit);
      params.grads_done(unit);
    }
  }

  Backend& backend_;
  KernelOps<T>& ops_;
  int max_batch_, max_seq_len_;
  int batch_ = 0, seq_ = 0;  // the shape of the last forward
  DeviceArray<int32_t> inputs_, targets_;  // the last batch, on the device
  DeviceArray<double> loss_sum_;           // device: the forwards' weighted mean losses

 private:
  DeviceArray<int32_t> inputs_staging_, targets_staging_;  // pinned
  std::unique_ptr<Event> uploaded_;                         // the staging is free again
  DeviceArray<double> loss_host_;                           // pinned: where take_loss reads it
  double loss_count_ = 0;
  int logits_rows_ = 0;
  // Set by a head_forward that ran the head's backward: its accumulator and the scale it used.
  G* head_grads_ = nullptr;
  std::optional<double> head_backward_scale_;
};

/// The model of `layout`'s architecture, with activations for batches of up to max_batch
/// sequences of max_seq_len; with activation checkpointing each block keeps only its input and
/// recomputes the rest in backward. `classifier_chunk`: see CausalLM's constructor (0, the
/// default, holds the logits of the whole batch).
template <typename T>
std::unique_ptr<CausalLM<T>> make_causal_lm(const ModelLayout& layout, Backend& backend, KernelOps<T>& ops,
                                            int max_batch, int max_seq_len, bool activation_checkpointing,
                                            int classifier_chunk = 0);

}  // namespace zt
