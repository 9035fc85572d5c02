#include "config/model_config.h"

#include <boost/json.hpp>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "config/llama_config.h"
#include "core/error.h"
#include "core/log.h"

namespace zt {

int64_t ModelConfig::block_params() const {
  const int64_t C = n_embd;
  if (architecture() == Architecture::kGpt2) {
    return 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  }
  const int64_t q = int64_t(n_head) * head_size(), kv = int64_t(n_kv_head) * head_size(), I = intermediate_size;
  const int64_t attn = C * (q + 2 * kv) + q * C + (attention_bias ? q + 2 * kv + C : qkv_bias ? q + 2 * kv : 0);
  const int64_t mlp = 3 * C * I + (mlp_bias ? 2 * I + C : 0);
  return 2 * C + attn + mlp;
}

int64_t ModelConfig::num_params() const {
  const int64_t C = n_embd, L = n_layer, V = vocab_size;
  if (architecture() == Architecture::kGpt2) return V * C + int64_t(n_positions) * C + L * block_params() + 2 * C;
  return V * C * (tie_word_embeddings ? 1 : 2) + L * block_params() + C;
}

namespace {

// GPT2Config's keys.
void read_gpt2(JsonSection& s, const boost::json::object& keys, ModelConfig& m, std::vector<std::string>& warnings) {
  s.read("n_layer", m.n_layer, 1, 1024);
  s.read("n_embd", m.n_embd, 1, 1 << 16);
  s.read("n_head", m.n_head, 1, 1024);
  s.read("n_positions", m.n_positions, 1, 1 << 20);
  int n_ctx = 0;
  if (s.read("n_ctx", n_ctx, 1, 1 << 20) && n_ctx != m.n_positions) {
    s.fail("n_ctx", cat("differs from n_positions (", m.n_positions, ")"));
  }
  s.read("vocab_size", m.vocab_size, 1, 1 << 20);
  s.read("layer_norm_epsilon", m.layer_norm_epsilon, 0.0, 1.0);
  s.read("initializer_range", m.initializer_range, 0.0, 10.0);
  if (m.n_embd % m.n_head != 0) {
    s.fail("n_head", cat("n_embd (", m.n_embd, ") must be divisible by n_head (", m.n_head, ")"));
  }
  std::string text;
  if (s.read("activation_function", text) && text != "gelu_new" && text != "gelu_pytorch_tanh") {
    s.fail("activation_function", cat("only the tanh GELU GPT-2 uses (gelu_new) is implemented, got \"", text, "\""));
  }
  int n_inner = 0;  // null (transformers 5 writes it so) means 4 * n_embd
  if (s.read("n_inner", n_inner, 1) && n_inner != 4 * m.n_embd) {
    s.fail("n_inner", cat("only the GPT-2 MLP width 4 * n_embd (", 4 * m.n_embd, ") is supported"));
  }
  // Switches that change the math, each accepted only at the value GPT-2 itself uses.
  bool flag = true;
  if (s.read("tie_word_embeddings", flag) && !flag) s.fail("tie_word_embeddings", "false is not implemented: the lm_head is always tied to wte");
  if (s.read("scale_attn_weights", flag) && !flag) s.fail("scale_attn_weights", "false is not implemented: attention is always scaled by 1/sqrt(head size)");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"}) {
    flag = false;
    if (s.read(key, flag) && flag) s.fail(key, "true is not implemented (it changes the attention)");
  }
  // Objects that change the model unless empty or null.
  if (const auto* v = keys.if_contains("pruned_heads"); v && !v->is_null() && !(v->is_object() && v->get_object().empty())) {
    s.fail("pruned_heads", "pruned attention heads are not implemented (every layer has n_head heads)");
  }
  s.mark_read("pruned_heads");
  bool any_dropout = false;
  // Dropout: zerotrain trains without it (as llm.c does). HF's GPT-2 configs carry 0.1; say so once.
  double dropout = 0;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"}) {
    if (s.read(key, dropout, 0.0, 1.0) && dropout > 0 && std::string(key) != "summary_first_dropout") any_dropout = true;
  }
  if (any_dropout) warnings.push_back("dropout is not implemented; training runs without it (as with *_pdrop = 0)");
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  boost::json::value json = parse_json_lenient(json_text, source);
  if (!json.is_object()) throw UsageError(cat(source, ": a model config must be a JSON object"));
  const boost::json::object& keys = json.get_object();
  JsonSection s(&keys, "", source);
  ModelConfig m;
  std::vector<std::string> warnings;
  s.read("model_type", m.model_type);
  if (m.model_type == "gpt2") {
    read_gpt2(s, keys, m, warnings);
  } else if (m.model_type == "llama" || m.model_type == "mistral" || m.model_type == "qwen2") {
    read_llama_family(s, keys, m, warnings);
  } else {
    s.fail("model_type", cat("\"", m.model_type, "\" is not implemented (gpt2, llama, mistral and qwen2 are)"));
  }
  if (const auto* v = keys.if_contains("quantization_config"); v && !v->is_null()) {
    s.fail("quantization_config", "quantized weights are not implemented; give the unquantized model");
  }
  s.mark_read("quantization_config");
  // The dtype the weights are stored in ("dtype" since transformers 5, "torch_dtype" before). It
  // does not decide the training precision: that is the DeepSpeed config's fp16/bf16.
  for (const char* key : {"dtype", "torch_dtype"}) {
    std::string name;
    if (s.read(key, name) && name != "float32" && name != "float16" && name != "bfloat16" && name != "float64" &&
        name != "auto") {
      s.fail(key, cat("\"", name, "\" is not a dtype HF writes (float32, float16, bfloat16)"));
    }
  }
  // What else PretrainedConfig and GPT2Config write (transformers 4.x and 5): metadata, token ids,
  // the classification head of GPT2DoubleHeads (summary_*), generation defaults and output
  // switches. None of it changes the language model's math.
  for (const char* key :
       {"architectures", "model_type", "transformers_version", "_name_or_path", "_commit_hash", "_attn_implementation",
        "_attn_implementation_autoset", "attn_implementation", "use_bfloat16", "use_cache", "output_past",
        "gradient_checkpointing", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
        "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "tokenizer_class", "prefix",
        "task_specific_params", "finetuning_task", "problem_type", "id2label", "label2id", "num_labels",
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "return_dict",
        "output_hidden_states", "output_attentions", "torchscript", "tf_legacy_loss", "is_decoder",
        "is_encoder_decoder", "tie_encoder_decoder", "chunk_size_feed_forward", "cross_attention_hidden_size",
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
        "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
        "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
        "output_scores", "return_dict_in_generate", "remove_invalid_values", "exponential_decay_length_penalty",
        "suppress_tokens", "begin_suppress_tokens"}) {
    s.mark_read(key);
  }
  s.finish();
  // After validation, so that a refused config gets its one line and nothing else.
  for (const auto& w : warnings) log_warn(source, ": ", w);
  return m;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_json_text(path), path);
}

std::string model_config_to_json(const ModelConfig& m, const std::string& torch_dtype) {
  if (m.architecture() == Architecture::kLlama) {
    boost::json::object o = llama_family_json(m);
    o["torch_dtype"] = torch_dtype;
    return boost::json::serialize(o);
  }
  boost::json::object o;
  o["architectures"] = boost::json::array{"GPT2LMHeadModel"};
  o["model_type"] = "gpt2";
  o["activation_function"] = "gelu_new";
  o["n_layer"] = m.n_layer;
  o["n_embd"] = m.n_embd;
  o["n_head"] = m.n_head;
  o["n_positions"] = m.n_positions;
  o["n_ctx"] = m.n_positions;
  o["vocab_size"] = m.vocab_size;
  o["layer_norm_epsilon"] = m.layer_norm_epsilon;
  o["initializer_range"] = m.initializer_range;
  o["resid_pdrop"] = 0.0;
  o["embd_pdrop"] = 0.0;
  o["attn_pdrop"] = 0.0;
  o["tie_word_embeddings"] = true;
  o["torch_dtype"] = torch_dtype;  // transformers 5 reads it too (its own key is "dtype")
  return boost::json::serialize(o);
}

}  // namespace zt
