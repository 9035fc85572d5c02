// What the model itself says about its memory, for estimates before a run: its parameter layout,
// its activations for a batch, and DeepSpeed's "largest layer". The one place zero/'s estimator
// learns about an architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/model_config.h"

namespace zt {

/// The arrays of activations and backward scratch Gpt2Model allocates on the device, in elements
/// of its compute type, one field per allocation: its constructor allocates exactly these, so the
/// estimate and the model cannot disagree.
struct Gpt2ActivationArrays {
  size_t per_block = 0;  ///< elements one block keeps (acts holds per_block x the kept blocks)
  size_t block_inputs = 0, acts = 0, lnf = 0, lnf_mean = 0, lnf_rstd = 0, logits = 0, losses = 0;
  size_t dres = 0, dln = 0, dqkv = 0, datty = 0, dfch = 0, dfch_gelu = 0;
  /// Every allocation's elements, in the constructor's order.
  std::vector<size_t> elements() const;
};
Gpt2ActivationArrays gpt2_activation_arrays(const ModelConfig& config, size_t batch, size_t seq_len,
                                            bool gradient_checkpointing);

/// The same for LlamaModel (the Llama family).
struct LlamaActivationArrays {
  size_t per_block = 0;
  size_t block_inputs = 0, acts = 0, lnf = 0, lnf_rstd = 0, logits = 0, losses = 0, rope_cos = 0, rope_sin = 0;
  size_t dres = 0, dln = 0, datty = 0, dq = 0, dk = 0, dv = 0, dh = 0, dgate = 0, dup = 0;
  std::vector<size_t> elements() const;
};
LlamaActivationArrays llama_activation_arrays(const ModelConfig& config, size_t batch, size_t seq_len,
                                              bool gradient_checkpointing);

/// Bytes of each activation array the model allocates for a forward and backward of `batch`
/// sequences of `seq_len` tokens (fp32), with one block kept at a time under gradient
/// checkpointing: one entry per device allocation (the CUDA allocator rounds each).
std::vector<size_t> activation_allocations(const ModelConfig& config, size_t batch, size_t seq_len,
                                           bool gradient_checkpointing);
/// Their sum.
size_t activation_bytes(const ModelConfig& config, size_t batch, size_t seq_len, bool gradient_checkpointing);

/// DeepSpeed's "largest layer": the most parameters held directly by one module of the HF model
/// (the token embedding or the lm_head, or an MLP projection when the model is wide).
int64_t largest_layer_params(const ModelConfig& config);

}  // namespace zt
