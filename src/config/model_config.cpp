#include "config/model_config.h"

#include <boost/json.hpp>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "core/error.h"
#include "core/log.h"

namespace zt {

int64_t ModelConfig::num_params() const {
  int64_t C = n_embd, L = n_layer;
  int64_t per_block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return int64_t(vocab_size) * C + int64_t(n_positions) * C + L * per_block + 2 * C;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  boost::json::value json = parse_json_lenient(json_text, source);
  if (!json.is_object()) throw UsageError(cat(source, ": a model config must be a JSON object"));
  JsonSection s(&json.get_object(), "", source);
  ModelConfig m;
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
  if (s.read("model_type", text) && text != "gpt2") {
    s.fail("model_type", cat("only gpt2 is supported, got \"", text, "\""));
  }
  int n_inner = 0;
  if (s.read("n_inner", n_inner, 1) && n_inner != 4 * m.n_embd) {
    s.fail("n_inner", cat("only the GPT-2 MLP width 4 * n_embd (", 4 * m.n_embd, ") is supported"));
  }
  bool flag = true;
  if (s.read("tie_word_embeddings", flag) && !flag) s.fail("tie_word_embeddings", "the lm_head is always tied to wte");
  if (s.read("scale_attn_weights", flag) && !flag) s.fail("scale_attn_weights", "attention is always scaled by 1/sqrt(head size)");
  flag = false;
  if (s.read("scale_attn_by_inverse_layer_idx", flag) && flag) s.fail("scale_attn_by_inverse_layer_idx", "not implemented");
  if (s.read("reorder_and_upcast_attn", flag) && flag) s.fail("reorder_and_upcast_attn", "not implemented");
  if (s.read("add_cross_attention", flag) && flag) s.fail("add_cross_attention", "not implemented");
  // Dropout: zerotrain trains without it (as llm.c does). HF's GPT-2 configs carry 0.1; say so once.
  double dropout = 0;
  bool any_dropout = false;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"}) {
    if (s.read(key, dropout, 0.0, 1.0) && dropout > 0 && std::string(key) != "summary_first_dropout") any_dropout = true;
  }
  if (any_dropout) log_warn(source, ": dropout is not implemented; training runs without it (as with *_pdrop = 0)");
  // Metadata HF writes into every config.json; it does not change the model.
  for (const char* key : {"architectures", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
                          "transformers_version", "use_cache", "task_specific_params", "summary_type",
                          "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                          "_name_or_path", "id2label", "label2id", "output_past", "gradient_checkpointing"}) {
    s.mark_read(key);
  }
  s.finish();
  return m;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_text_file(path), path);
}

std::string model_config_to_json(const ModelConfig& m) {
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
  o["torch_dtype"] = "float32";
  return boost::json::serialize(o);
}

}  // namespace zt
