// The Llama family's config.json (llama, mistral, qwen2): published models' shapes give their
// published parameter counts, absent keys take HF's per-class defaults, keys that would change
// the math are refused by name, and the config written back reads the same.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <string>

#include "config/model_config.h"
#include "core/error.h"
#include "model_config_test_util.h"
#include "model/llama_layout.h"
#include "model/rope.h"

namespace zt {
namespace {

// Published configs, reduced to the keys that fix the shape (as on the Hub).
const char* kLlama32_1B = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false,
  "hidden_act": "silu", "pretraining_tp": 1, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0", "use_cache": true, "attention_dropout": 0.0})";
const char* kQwen2_05B = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
  "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 24,
  "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16",
  "attention_dropout": 0.0, "initializer_range": 0.02})";
const char* kMistral7B = R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "sliding_window": 4096, "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1,
  "eos_token_id": 2, "torch_dtype": "bfloat16"})";

using testing::error_of;
using testing::with_key;

TEST(LlamaConfig, PublishedShapesGiveThePublishedParameterCounts) {
  // The counts HF's model.num_parameters() reports for these models.
  const ModelConfig llama = parse_model_config(kLlama32_1B, "config.json");
  EXPECT_EQ(llama.num_params(), 1235814400);
  EXPECT_EQ(llama.n_kv_head, 8);
  EXPECT_EQ(llama.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(llama.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  const ModelConfig qwen = parse_model_config(kQwen2_05B, "config.json");
  EXPECT_EQ(qwen.num_params(), 494032768);
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.sliding_window, 0);  // use_sliding_window false
  const ModelConfig mistral = parse_model_config(kMistral7B, "config.json");
  EXPECT_EQ(mistral.num_params(), 7241732096);
  EXPECT_EQ(mistral.sliding_window, 4096);
  for (const ModelConfig* m : {&llama, &qwen, &mistral}) {
    EXPECT_EQ(int64_t(LlamaLayout(*m).num_params()), m->num_params()) << m->model_type;
  }
}

TEST(LlamaConfig, AbsentKeysTakeEachClassDefault) {
  // HF's quirk: an absent num_key_value_heads is the constructor's default, which differs by class.
  EXPECT_EQ(parse_model_config(with_key(kLlama32_1B, "-num_key_value_heads", nullptr), "c").n_kv_head, 32);
  EXPECT_EQ(parse_model_config(with_key(kMistral7B, "-num_key_value_heads", nullptr), "c").n_kv_head, 8);
  // Qwen2's default (32) does not divide Qwen2-0.5B's 14 heads: refused by name, as HF cannot build it.
  EXPECT_NE(error_of(with_key(kQwen2_05B, "-num_key_value_heads", nullptr)).find("num_key_value_heads: must divide"),
            std::string::npos);
  EXPECT_EQ(parse_model_config(with_key(kMistral7B, "num_key_value_heads", nullptr), "c").n_kv_head, 32);
  EXPECT_EQ(parse_model_config(with_key(kMistral7B, "-tie_word_embeddings", nullptr), "c").tie_word_embeddings, false);
  EXPECT_EQ(parse_model_config(with_key(kMistral7B, "sliding_window", nullptr), "c").sliding_window, 0);
}

TEST(LlamaConfig, MathChangingKeysAreRefusedByName) {
  struct Case {
    const char* base;
    const char* key;
    boost::json::value value;
    const char* reported;  // the key the message names
  };
  const Case cases[] = {
      {kLlama32_1B, "hidden_act", "gelu", "hidden_act"},
      {kLlama32_1B, "num_key_value_heads", 5, "num_key_value_heads"},
      {kLlama32_1B, "head_dim", 128, "head_dim"},
      {kLlama32_1B, "rope_scaling", boost::json::object{{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_scaling.rope_type"},
      {kLlama32_1B, "rope_scaling", boost::json::object{{"type", "longrope"}, {"factor", 4.0}}, "rope_scaling.type"},
      {kLlama32_1B, "rope_scaling", boost::json::object{{"rope_type", "linear"}}, "rope_scaling.factor"},
      {kLlama32_1B, "model_type", "gemma", "model_type"},
      {kLlama32_1B, "rope_scaling", boost::json::object{{"type", "linear"}, {"rope_type", "yarn"}, {"factor", 2.0}},
       "rope_scaling.type"},
      {kQwen2_05B, "attention_bias", true, "attention_bias"},  // not a Qwen2Config key
      {kMistral7B, "quantization_config", boost::json::object{{"quant_method", "gptq"}}, "quantization_config"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(with_key(c.base, c.key, c.value));
    EXPECT_EQ(e.rfind(std::string("config.json: ") + c.reported + ":", 0), 0u) << c.key << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Accepted: the rope types that are implemented, or that change nothing at block_size <=
  // max_position_embeddings.
  EXPECT_EQ(error_of(with_key(kLlama32_1B, "rope_scaling",
                              boost::json::object{{"type", "linear"}, {"rope_type", "linear"}, {"factor", 2.0}})),
            "");
  for (const char* type : {"linear", "dynamic", "default"}) {
    EXPECT_EQ(error_of(with_key(kLlama32_1B, "rope_scaling", boost::json::object{{"type", type}, {"factor", 2.0}})), "")
        << type;
  }
}

TEST(LlamaConfig, WrittenConfigReadsTheSame) {
  for (const char* text : {kLlama32_1B, kQwen2_05B, kMistral7B}) {
    const ModelConfig a = parse_model_config(text, "config.json");
    const ModelConfig b = parse_model_config(model_config_to_json(a, "float32"), "written.json");
    EXPECT_EQ(b.model_type, a.model_type);
    EXPECT_EQ(b.num_params(), a.num_params());
    EXPECT_EQ(b.n_kv_head, a.n_kv_head);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(b.layer_norm_epsilon, a.layer_norm_epsilon);
    EXPECT_EQ(b.rope_scaling.type, a.rope_scaling.type);
    EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
    EXPECT_EQ(b.sliding_window, a.sliding_window);
    EXPECT_EQ(b.eos_token_ids, a.eos_token_ids);
    EXPECT_EQ(b.bos_token_id, a.bos_token_id);
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
    EXPECT_EQ(b.qkv_bias, a.qkv_bias);
  }
}

TEST(Rope, InverseFrequenciesFollowHfFormulas) {
  ModelConfig m = parse_model_config(kLlama32_1B, "config.json");
  const std::vector<float> inv = rope_inv_freq(m);
  ASSERT_EQ(inv.size(), 32u);
  // Llama 3's scaling recomputed here in double: each band's rule.
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 32; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / 64.0), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > low_wavelen) {
      want = f / 32, ++divided;
    } else if (wavelen >= high_wavelen) {
      const double s = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - s) * f / 32 + s * f, ++blended;
    } else {
      ++kept;
    }
    EXPECT_NEAR(inv[size_t(i)], want, 1e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // Linear scaling divides the positions: position t at factor 4 has the angles of t / 4.
  m.rope_scaling = RopeScaling{};
  std::vector<double> c1, s1, c4, s4;
  rope_tables(m, 9, c1, s1);
  m.rope_scaling.type = RopeScaling::Type::kLinear;
  m.rope_scaling.factor = 4.0;
  rope_tables(m, 9, c4, s4);
  for (size_t i = 0; i < 32; ++i) {
    EXPECT_NEAR(c4[8 * 32 + i], c1[2 * 32 + i], 1e-6);
    EXPECT_NEAR(s4[8 * 32 + i], s1[2 * 32 + i], 1e-6);
  }
}

}  // namespace
}  // namespace zt
