#include "config/llama_config.h"

#include <boost/json/value_from.hpp>
#include <cstdint>

#include "core/error.h"

namespace zt {

namespace {

// The defaults of transformers' LlamaConfig, MistralConfig and Qwen2Config (4.40), which a
// config.json without the key gets. num_key_value_heads: when the key is absent HF takes the
// argument's default (llama: the head count, mistral: 8, qwen2: 32); null means the head count.
struct FamilyDefaults {
  const char* architecture;
  int vocab_size, intermediate_size, max_position_embeddings, kv_heads;
  int sliding_window;  // 0: none
  bool qkv_bias;
};

FamilyDefaults defaults_of(const std::string& model_type) {
  if (model_type == "mistral") return {"MistralForCausalLM", 32000, 14336, 4096 * 32, 8, 4096, false};
  if (model_type == "qwen2") return {"Qwen2ForCausalLM", 151936, 22016, 32768, 32, 0, true};
  return {"LlamaForCausalLM", 32000, 11008, 2048, 0, 0, false};
}

void read_rope_scaling(JsonSection& s, const boost::json::object& keys, ModelConfig& m) {
  const auto* v = keys.if_contains("rope_scaling");
  s.mark_read("rope_scaling");
  if (!v || v->is_null()) return;
  JsonSection r = s.child("rope_scaling");
  std::string type;
  // "type" before transformers 4.45, "rope_type" since; either names it (and messages name the
  // one the file has).
  const char* type_key = "rope_type";
  std::string legacy;
  const bool has_legacy = r.read("type", legacy);
  if (!r.read("rope_type", type) && has_legacy) type = legacy, type_key = "type";
  if (has_legacy && legacy != type) r.fail("type", cat("\"", legacy, "\" differs from rope_type \"", type, "\""));
  if (type.empty()) r.fail("rope_type", "missing: rope_scaling needs a type");
  double factor = 1.0;
  const bool has_factor = r.read("factor", factor, 1.0, 1024.0);
  if (type == "default") {
  } else if (type == "linear") {
    m.rope_scaling.type = RopeScaling::Type::kLinear;
  } else if (type == "dynamic") {
    // Dynamic NTK scaling only changes the angles of sequences longer than
    // max_position_embeddings, and block_size never exceeds it: the plain angles are exact.
  } else if (type == "llama3") {
    m.rope_scaling.type = RopeScaling::Type::kLlama3;
    // HF divides original_max_position_embeddings by it (a ZeroDivisionError there at 0).
    if (r.read("low_freq_factor", m.rope_scaling.low_freq_factor, 0.0) && m.rope_scaling.low_freq_factor == 0) {
      r.fail("low_freq_factor", "must be > 0 (the wavelengths are divided by it)");
    }
    r.read("high_freq_factor", m.rope_scaling.high_freq_factor, 0.0);
    r.read("original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings, 1);
    if (!(m.rope_scaling.high_freq_factor > m.rope_scaling.low_freq_factor)) {
      r.fail("high_freq_factor", "must be larger than low_freq_factor");
    }
  } else {
    r.fail(type_key, cat("\"", type, "\" is not implemented (linear, dynamic and llama3 are)"));
  }
  if (m.rope_scaling.type != RopeScaling::Type::kNone && !has_factor) r.fail("factor", "missing");
  m.rope_scaling.factor = factor;
  // Keys other rope types carry, read only to be named when they do not belong.
  r.finish();
}

void read_token_ids(JsonSection& s, const boost::json::object& keys, ModelConfig& m) {
  s.read("bos_token_id", m.bos_token_id, 0);
  const auto* eos = keys.if_contains("eos_token_id");
  s.mark_read("eos_token_id");
  if (!eos || eos->is_null()) return;
  // Ids are held as int: a larger one must be refused, not cut (4294967298 would stop at id 2).
  auto add = [&](const boost::json::value& v) {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > INT32_MAX) {
      s.fail("eos_token_id", cat("expected a token id or a list of them, got ", describe_json(v)));
    }
    m.eos_token_ids.push_back(int(v.as_int64()));
  };
  if (eos->is_array()) {
    for (const auto& v : eos->get_array()) add(v);
  } else {
    add(*eos);
  }
}

}  // namespace

void read_llama_family(JsonSection& s, const boost::json::object& keys, ModelConfig& m,
                       std::vector<std::string>& warnings) {
  const FamilyDefaults d = defaults_of(m.model_type);
  m.vocab_size = d.vocab_size;
  m.n_embd = 4096;
  m.intermediate_size = d.intermediate_size;
  m.n_layer = 32;
  m.n_head = 32;
  m.n_positions = d.max_position_embeddings;
  m.layer_norm_epsilon = 1e-6;
  m.tie_word_embeddings = false;
  m.qkv_bias = d.qkv_bias;
  s.read("vocab_size", m.vocab_size, 1, int64_t(1) << 30);
  s.read("hidden_size", m.n_embd, 1, 1 << 17);
  s.read("intermediate_size", m.intermediate_size, 1, 1 << 20);
  s.read("num_hidden_layers", m.n_layer, 1, 1024);
  s.read("num_attention_heads", m.n_head, 1, 1024);
  s.read("max_position_embeddings", m.n_positions, 1, 1 << 24);
  s.read("rms_norm_eps", m.layer_norm_epsilon, 0.0, 1.0);
  s.read("initializer_range", m.initializer_range, 0.0, 10.0);
  s.read("rope_theta", m.rope_theta, 1.0);
  s.read("tie_word_embeddings", m.tie_word_embeddings);
  if (m.n_embd % m.n_head != 0) {
    s.fail("num_attention_heads", cat("hidden_size (", m.n_embd, ") must be divisible by num_attention_heads (",
                                      m.n_head, ")"));
  }
  if (m.head_size() % 2 != 0) s.fail("num_attention_heads", cat("the head size ", m.head_size(), " must be even (rotary pairs)"));
  int head_dim = 0;
  if (s.read("head_dim", head_dim, 1) && head_dim != m.head_size()) {
    s.fail("head_dim", cat("only hidden_size / num_attention_heads (", m.head_size(), ") is implemented"));
  }
  m.n_kv_head = keys.contains("num_key_value_heads") || d.kv_heads == 0 ? m.n_head : d.kv_heads;
  s.read("num_key_value_heads", m.n_kv_head, 1, 1024);
  if (m.n_head % m.n_kv_head != 0) {
    s.fail("num_key_value_heads", cat("must divide num_attention_heads (", m.n_head, "), got ", m.n_kv_head));
  }
  std::string act = "silu";
  if (s.read("hidden_act", act) && act != "silu") {
    s.fail("hidden_act", cat("only silu (SwiGLU) is implemented, got \"", act, "\""));
  }
  if (m.model_type == "llama") {
    s.read("attention_bias", m.attention_bias);
    s.read("mlp_bias", m.mlp_bias);
    // Slices the projections during pretraining; the sum is the same matmul.
    int pretraining_tp = 1;
    s.read("pretraining_tp", pretraining_tp, 1);
  }
  if (m.model_type == "mistral") {
    m.sliding_window = d.sliding_window;
    s.read("sliding_window", m.sliding_window, 1);
    if (keys.contains("sliding_window") && keys.at("sliding_window").is_null()) m.sliding_window = 0;
  }
  if (m.model_type == "qwen2") {
    bool use_sliding_window = false;
    s.read("use_sliding_window", use_sliding_window);
    int window = 4096, max_window_layers = 28;
    s.read("sliding_window", window, 1);
    s.read("max_window_layers", max_window_layers, 0);
    // Qwen2 windows only the layers from max_window_layers on, and only with use_sliding_window.
    if (use_sliding_window && max_window_layers < m.n_layer) m.sliding_window = window;
  }
  read_rope_scaling(s, keys, m);
  double dropout = 0;
  if (s.read("attention_dropout", dropout, 0.0, 1.0) && dropout > 0) {
    warnings.push_back("attention_dropout is not implemented; training runs without it");
  }
  read_token_ids(s, keys, m);
}

boost::json::object llama_family_json(const ModelConfig& m) {
  const FamilyDefaults d = defaults_of(m.model_type);
  boost::json::object o;
  o["architectures"] = boost::json::array{d.architecture};
  o["model_type"] = m.model_type;
  o["vocab_size"] = m.vocab_size;
  o["hidden_size"] = m.n_embd;
  o["intermediate_size"] = m.intermediate_size;
  o["num_hidden_layers"] = m.n_layer;
  o["num_attention_heads"] = m.n_head;
  o["num_key_value_heads"] = m.n_kv_head;
  o["max_position_embeddings"] = m.n_positions;
  o["hidden_act"] = "silu";
  o["rms_norm_eps"] = m.layer_norm_epsilon;
  o["initializer_range"] = m.initializer_range;
  o["rope_theta"] = m.rope_theta;
  o["tie_word_embeddings"] = m.tie_word_embeddings;
  o["attention_dropout"] = 0.0;
  if (m.model_type == "llama") {
    o["attention_bias"] = m.attention_bias;
    o["mlp_bias"] = m.mlp_bias;
  }
  if (m.model_type == "mistral") o["sliding_window"] = m.sliding_window > 0 ? boost::json::value(m.sliding_window) : nullptr;
  if (m.model_type == "qwen2") o["use_sliding_window"] = false;
  const RopeScaling& r = m.rope_scaling;
  if (r.type == RopeScaling::Type::kLinear) {
    // "type": transformers before 4.43 refuses any other key here; later ones still read it.
    o["rope_scaling"] = {{"type", "linear"}, {"factor", r.factor}};
  } else if (r.type == RopeScaling::Type::kLlama3) {
    o["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  } else {
    o["rope_scaling"] = nullptr;
  }
  if (m.bos_token_id >= 0) o["bos_token_id"] = m.bos_token_id;
  if (m.eos_token_ids.size() == 1) o["eos_token_id"] = m.eos_token_ids[0];
  if (m.eos_token_ids.size() > 1) o["eos_token_id"] = boost::json::value_from(m.eos_token_ids);
  return o;
}

}  // namespace zt
