// The GPT-2 model shape, read from an HF GPT-2 config.json.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

struct ModelConfig {
  int n_layer = 12;
  int n_embd = 768;
  int n_head = 12;
  int n_positions = 1024;
  int vocab_size = 50257;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;

  int head_size() const { return n_embd / n_head; }
  /// Ψ: the number of trainable parameters (the lm_head is tied to wte).
  int64_t num_params() const;
};

/// Reads an HF GPT-2 config.json. Unknown keys, unsupported variants (another activation,
/// untied embeddings, n_inner != 4 n_embd) and bad values are UsageErrors naming the key.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
/// Writes an HF-compatible config.json text for `config`, whose weights are stored as
/// `torch_dtype` (HF's name: "float32", "bfloat16", "float16").
std::string model_config_to_json(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace zt
