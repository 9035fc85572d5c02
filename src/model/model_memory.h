// What the model itself says about its memory, for estimates before a run: its parameter layout,
// its activations for a batch, and DeepSpeed's "largest layer". The one place zero/'s estimator
// learns about an architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "config/model_config.h"
#include "model/param_layout.h"

namespace zt {

/// The parameter layout of the model `config` describes.
std::unique_ptr<ParamLayout> make_param_layout(const ModelConfig& config);

/// Bytes of activations the model keeps for a forward and backward of `batch` sequences of
/// `seq_len` tokens (fp32), with one block kept at a time under gradient checkpointing.
size_t activation_bytes(const ModelConfig& config, size_t batch, size_t seq_len, bool gradient_checkpointing);

/// DeepSpeed's "largest layer": the most parameters held directly by one module of the HF model
/// (for GPT-2 the token embedding, or the MLP's first Linear when n_embd is large).
int64_t largest_layer_params(const ModelConfig& config);

}  // namespace zt
