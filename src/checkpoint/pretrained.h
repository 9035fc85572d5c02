// An HF GPT-2 model folder (--model_name_or_path) as the starting state of a fine-tuning run:
// its tensors checked against the layout, then served to ZeroEngine::load by range.
#pragma once

#include <string>

#include "checkpoint/safetensors.h"
#include "model/model_layout.h"
#include "zero/engine.h"

namespace zt {

/// Every GPT-2 tensor of `layout` is in `weights` with HF's shape; else a UsageError naming `dir`
/// and the tensor.
void check_pretrained(const SafetensorsReader& weights, const ModelLayout& layout, const std::string& dir);

/// The master weights from `weights` (fp32, whatever the file's dtype), the moments and counters
/// fresh. Alignment gaps between tensors read as zero, as after a fresh initialisation. Both
/// references must outlive the source.
StateSource pretrained_source(const SafetensorsReader& weights, const ModelLayout& layout);

}  // namespace zt
