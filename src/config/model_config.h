// The model shape, read from an HF config.json: GPT-2, or the Llama family (model_type llama,
// mistral, qwen2), whose HF keys map onto the same fields (num_hidden_layers -> n_layer, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class Architecture { kGpt2, kLlama };

/// How the rotary angles are stretched (HF's rope_scaling). kNone also covers "dynamic": it
/// changes nothing until a sequence passes max_position_embeddings, which zerotrain never runs.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 } type = Type::kNone;
  double factor = 1.0;
  // llama3 only (HF's _compute_llama3_parameters).
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type = "gpt2";  ///< HF's: gpt2, llama, mistral, qwen2
  int n_layer = 12;                 ///< llama: num_hidden_layers
  int n_embd = 768;                 ///< llama: hidden_size
  int n_head = 12;                  ///< llama: num_attention_heads
  int n_positions = 1024;           ///< llama: max_position_embeddings
  int vocab_size = 50257;
  double layer_norm_epsilon = 1e-5;  ///< llama: rms_norm_eps
  double initializer_range = 0.02;

  // The Llama family only.
  int n_kv_head = 0;          ///< num_key_value_heads (grouped-query attention)
  int intermediate_size = 0;  ///< the SwiGLU MLP's width
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = true;  ///< false: lm_head.weight is a parameter of its own
  bool attention_bias = false;      ///< biases on q, k, v and o_proj (llama's attention_bias)
  bool qkv_bias = false;            ///< biases on q, k and v_proj only (qwen2)
  bool mlp_bias = false;            ///< biases on gate, up and down_proj (llama's mlp_bias)
  int sliding_window = 0;           ///< mistral/qwen2: attention window, 0 = none
  int bos_token_id = -1;            ///< carried to the exported config.json (-1: none)
  std::vector<int> eos_token_ids;   ///< config.json's eos_token_id (an id or a list); generation stops at any

  Architecture architecture() const { return model_type == "gpt2" ? Architecture::kGpt2 : Architecture::kLlama; }
  int head_size() const { return n_embd / n_head; }
  int kv_heads() const { return architecture() == Architecture::kGpt2 ? n_head : n_kv_head; }
  /// Ψ: the number of trainable parameters (a tied lm_head counts once).
  int64_t num_params() const;
  /// Parameters of one transformer block.
  int64_t block_params() const;
};

/// The sequence length without --block_size: the model's positions, at most 1024 (HF run_clm's
/// rule; Llama 3's 131,072 positions would not fit a batch's activations anywhere).
inline int default_block_size(const ModelConfig& config) { return config.n_positions < 1024 ? config.n_positions : 1024; }

/// Reads an HF config.json. Unknown keys, unsupported variants and bad values are UsageErrors
/// naming the key.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
/// Writes an HF-compatible config.json text for `config`, whose weights are stored as
/// `torch_dtype` (HF's name: "float32", "bfloat16", "float16").
std::string model_config_to_json(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace zt
