#include "model/causal_lm.h"

#include <algorithm>

#include "core/error.h"
#include "model/gpt2.h"
#include "model/llama.h"
#include "model/model_memory.h"

namespace zt {

template <typename T>
CausalLM<T>::CausalLM(Backend& backend, KernelOps<T>& ops, int max_batch, int max_seq_len, int vocab_size,
                      int classifier_chunk)
    : backend_(backend), ops_(ops), max_batch_(max_batch), max_seq_len_(max_seq_len) {
  const size_t BT = size_t(max_batch) * max_seq_len;
  ZT_USAGE_CHECK(classifier_chunk >= kClassifierChunkAuto, "--classifier_chunk_tokens must be auto, 0 or a number "
                 "of tokens, got ", classifier_chunk);
  logits_rows_ = int(classifier_logits_rows(BT, size_t(ops.logits_stride(vocab_size)) * sizeof(T), classifier_chunk));
  inputs_ = DeviceArray<int32_t>(backend, BT);
  targets_ = DeviceArray<int32_t>(backend, BT);
  inputs_staging_ = DeviceArray<int32_t>(backend, BT, Pool::kPinned);
  targets_staging_ = DeviceArray<int32_t>(backend, BT, Pool::kPinned);
  uploaded_ = backend.create_event();
  loss_sum_ = DeviceArray<double>(backend, 1);
  loss_host_ = DeviceArray<double>(backend, 1, Pool::kPinned);
  backend.zero_async(loss_sum_.data(), sizeof(double), backend.compute_stream());
}

template <typename T>
void CausalLM<T>::start_forward(const int32_t* inputs, const int32_t* targets, int B, int T_) {
  ZT_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= max_seq_len_, "batch ", B, "x", T_,
           " exceeds the allocated ", max_batch_, "x", max_seq_len_);
  batch_ = B;
  seq_ = T_;
  const size_t n = size_t(B) * T_;
  backend_.synchronize(*uploaded_);  // the previous batch's copies have read the staging
  std::copy(inputs, inputs + n, inputs_staging_.data());
  std::copy(targets, targets + n, targets_staging_.data());
  Stream& compute = backend_.compute_stream();
  backend_.copy_async(inputs_.data(), inputs_staging_.data(), n * sizeof(int32_t), compute);
  backend_.copy_async(targets_.data(), targets_staging_.data(), n * sizeof(int32_t), compute);
  backend_.record(*uploaded_, compute);
  // The mean's denominator comes from the host's copy of the targets: no device read.
  loss_count_ = 0;
  for (size_t i = 0; i < n; ++i) loss_count_ += targets[i] >= 0 ? 1 : 0;
}

template <typename T>
double CausalLM<T>::take_loss() {
  Stream& compute = backend_.compute_stream();
  backend_.copy_async(loss_host_.data(), loss_sum_.data(), sizeof(double), compute);
  backend_.zero_async(loss_sum_.data(), sizeof(double), compute);
  backend_.synchronize(compute);
  return *loss_host_.data();
}

template <typename T>
void CausalLM<T>::head_forward(ParamSource<T>& params, int head_unit, const T* normed, T* logits, S* losses,
                               T* dnormed, int C, int V, double loss_weight, std::optional<double> backward_scale) {
  const int BT = batch_ * seq_, chunk = std::min(BT, logits_rows_);
  head_grads_ = nullptr;
  head_backward_scale_.reset();
  // With a backward to follow, the head's backward runs now, chunk by chunk (a table may then
  // write dlogits in the softmax's pass); else the logits of the last chunk stay (head_backward
  // needs one chunk: the whole batch).
  const bool backward_now = backward_scale.has_value();
  if (backward_now) head_grads_ = params.grad_accumulator(head_unit);
  const T* head = params.acquire_weights(head_unit);
  for (int r0 = 0; r0 < BT; r0 += chunk) {
    const int rows = std::min(chunk, BT - r0);
    const size_t at = size_t(r0) * C;
    const int32_t* targets = targets_.data() + r0;
    if (backward_now) {
      ops_.classifier_forward_backward(dnormed + at, head_grads_, logits, losses + r0, normed + at, head, targets, rows,
                                       C, V, loss_sum_.data(), per_position(loss_weight),
                                       per_position(*backward_scale));
    } else {
      ops_.classifier_forward(logits, losses + r0, normed + at, head, targets, rows, C, V, loss_sum_.data(),
                              per_position(loss_weight));
    }
  }
  params.release_weights(head_unit);
  if (backward_now) head_backward_scale_ = backward_scale;
}

template <typename T>
GradOf<T>* CausalLM<T>::head_backward(ParamSource<T>& params, int head_unit, int embedding_unit, const T* normed,
                                      T* logits, T* dnormed, int C, int V, double dloss_scale) {
  const int BT = batch_ * seq_;
  if (head_backward_scale_) {  // head_forward ran it, chunk by chunk
    ZT_CHECK(*head_backward_scale_ == dloss_scale, "backward with dloss_scale ", dloss_scale,
             " after a forward that ran the classifier's backward with ", *head_backward_scale_);
    head_backward_scale_.reset();
    if (head_unit != embedding_unit) params.grads_done(head_unit);
    return head_grads_;
  }
  ZT_CHECK(logits_rows_ >= BT, "backward after a forward without backward_scale: the classifier runs in chunks of ",
           logits_rows_, " of the batch's ", BT, " tokens and keeps no logits for a later backward");
  G* g_head = params.grad_accumulator(head_unit);
  const T* head = params.acquire_weights(head_unit);
  ops_.classifier_backward(dnormed, g_head, logits, normed, head, targets_.data(), BT, C, V,
                           per_position(dloss_scale));
  params.release_weights(head_unit);
  if (head_unit != embedding_unit) params.grads_done(head_unit);
  return g_head;
}

template <typename T>
std::unique_ptr<CausalLM<T>> make_causal_lm(const ModelLayout& layout, Backend& backend, KernelOps<T>& ops,
                                            int max_batch, int max_seq_len, bool activation_checkpointing,
                                            int classifier_chunk) {
  if (const auto* llama = dynamic_cast<const LlamaLayout*>(&layout)) {
    return std::make_unique<LlamaModel<T>>(*llama, backend, ops, max_batch, max_seq_len, activation_checkpointing,
                                           classifier_chunk);
  }
  const auto* gpt2 = dynamic_cast<const Gpt2Layout*>(&layout);
  ZT_CHECK(gpt2 != nullptr, "no model for the layout of ", layout.config().model_type);
  return std::make_unique<Gpt2Model<T>>(*gpt2, backend, ops, max_batch, max_seq_len, activation_checkpointing,
                                        classifier_chunk);
}

template class CausalLM<float>;
template class CausalLM<double>;
template class CausalLM<bf16>;
template std::unique_ptr<CausalLM<float>> make_causal_lm(const ModelLayout&, Backend&, KernelOps<float>&, int, int,
                                                         bool, int);
template std::unique_ptr<CausalLM<double>> make_causal_lm(const ModelLayout&, Backend&, KernelOps<double>&, int, int,
                                                          bool, int);
template std::unique_ptr<CausalLM<bf16>> make_causal_lm(const ModelLayout&, Backend&, KernelOps<bf16>&, int, int,
                                                        bool, int);

}  // namespace zt
