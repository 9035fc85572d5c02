// HF GPT-2 config.json as transformers writes it: every key it can carry loads, keys that would
// change the math are refused by name. The fixtures in tests/data/ were written by transformers
// itself (5.23.0's save_pretrained of GPT2Config(), and 4.30.2's full to_json_string).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "config/json_reader.h"
#include "config/model_config.h"
#include "core/error.h"
#include "model_config_test_util.h"

namespace zt {
namespace {

std::string fixture(const std::string& name) { return read_text_file(std::string(ZT_SOURCE_DIR) + "/tests/data/" + name); }

using testing::error_of;
using testing::with_key;

TEST(ModelConfig, Transformers5ConfigLoads) {
  // GPT2Config() defaults as a GPT2LMHeadModel's save_pretrained writes them: the 124M shape,
  // "architectures", "dtype" instead of "torch_dtype", "n_inner": null.
  const std::string text = fixture("gpt2_config_transformers5.json");
  ASSERT_NE(text.find("\"transformers_version\": \"5."), std::string::npos);
  ASSERT_NE(text.find("\"dtype\": \"float32\""), std::string::npos);
  ASSERT_EQ(text.find("torch_dtype"), std::string::npos);
  const ModelConfig m = parse_model_config(text, "config.json");
  EXPECT_EQ(m.n_layer, 12);
  EXPECT_EQ(m.n_embd, 768);
  EXPECT_EQ(m.n_head, 12);
  EXPECT_EQ(m.n_positions, 1024);
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_DOUBLE_EQ(m.layer_norm_epsilon, 1e-5);
}

TEST(ModelConfig, EveryKeyTransformers4WritesLoads) {
  const ModelConfig m = parse_model_config(fixture("gpt2_config_transformers4_full.json"), "config.json");
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_embd, 64);
  EXPECT_EQ(m.vocab_size, 256);
}

TEST(ModelConfig, BothDtypeKeysLoad) {
  const std::string base = fixture("gpt2_config_transformers5.json");
  for (const char* key : {"dtype", "torch_dtype"}) {
    for (const char* name : {"float32", "bfloat16", "float16"}) {
      EXPECT_EQ(error_of(with_key(base, key, name)), "") << key << " " << name;
    }
    const std::string e = error_of(with_key(base, key, "int8"));
    EXPECT_NE(e.find(std::string("config.json: ") + key + ": \"int8\""), std::string::npos) << e;
  }
}

TEST(ModelConfig, MathChangingKeysAreRefusedByName) {
  const std::string base = fixture("gpt2_config_transformers5.json");
  struct Case {
    const char* key;
    boost::json::value value;
  };
  const Case cases[] = {{"reorder_and_upcast_attn", true},
                        {"scale_attn_by_inverse_layer_idx", true},
                        {"add_cross_attention", true},
                        {"activation_function", "relu"},
                        {"activation_function", "gelu"},
                        {"tie_word_embeddings", false},
                        {"scale_attn_weights", false},
                        {"n_inner", 100},
                        {"model_type", "bert"},
                        {"pruned_heads", boost::json::object{{"0", boost::json::array{1}}}},
                        {"quantization_config", boost::json::object{{"load_in_8bit", true}}}};
  for (const Case& c : cases) {
    const std::string e = error_of(with_key(base, c.key, c.value));
    EXPECT_EQ(e.rfind(std::string("config.json: ") + c.key + ":", 0), 0u) << c.key << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // ... and accepted at the value GPT-2 uses.
  for (const Case& c : {Case{"reorder_and_upcast_attn", false}, Case{"activation_function", "gelu_pytorch_tanh"},
                        Case{"pruned_heads", boost::json::object{}}, Case{"quantization_config", nullptr},
                        Case{"n_inner", 3072}}) {
    EXPECT_EQ(error_of(with_key(base, c.key, c.value)), "") << c.key;
  }
}

TEST(ModelConfig, MisspelledKeyNamesTheClosest) {
  const std::string e = error_of(with_key(fixture("gpt2_config_transformers5.json"), "n_layers", 4));
  EXPECT_NE(e.find("n_layers: unknown key; did you mean 'n_layer'"), std::string::npos) << e;
}

}  // namespace
}  // namespace zt
