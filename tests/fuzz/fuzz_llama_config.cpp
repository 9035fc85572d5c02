// Fuzz harness: the Llama family's config.json (parse_model_config with model_type llama, mistral
// or qwen2: config/llama_config.h) on any bytes, held to what a Llama model needs of it. The GPT-2
// keys have their own harness (fuzz_model_config.cpp); this one's seeds are Llama-family files.
// Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded mutations of
// corpus/llama_config/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "fuzz_check.h"
#include "fuzz_eos_ids.h"

namespace {

constexpr const char* kSource = "fuzz/config.json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  zt::fuzz::check_reader(kSource, [&] {
    const zt::ModelConfig m = zt::parse_model_config(text, kSource);
    if (m.architecture() != zt::Architecture::kLlama) return;  // a mutation to gpt2: fuzz_model_config's
    // An accepted config builds a Llama model: sizes positive, heads dividing the width into
    // even (rotary) halves, key/value heads dividing the heads, and rotary settings that give
    // finite angles.
    if (m.n_layer < 1 || m.n_embd < 1 || m.n_head < 1 || m.n_positions < 1 || m.vocab_size < 1 ||
        m.intermediate_size < 1 || m.n_embd % m.n_head != 0 || m.head_size() % 2 != 0) {
      zt::fuzz::finding("a config accepted that no Llama model can have");
    }
    if (m.n_kv_head < 1 || m.n_head % m.n_kv_head != 0) {
      zt::fuzz::finding("key/value heads accepted that do not divide the heads");
    }
    if (m.sliding_window < 0 || !(m.layer_norm_epsilon >= 0) || m.num_params() < 1) {
      zt::fuzz::finding("a window, epsilon or parameter count accepted out of range");
    }
    const zt::RopeScaling& r = m.rope_scaling;
    if (!(m.rope_theta >= 1 && std::isfinite(m.rope_theta)) || !(r.factor >= 1 && std::isfinite(r.factor))) {
      zt::fuzz::finding("rope_theta or a rope_scaling factor accepted that gives no angles");
    }
    if (r.type == zt::RopeScaling::Type::kLlama3 &&
        !(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor && r.original_max_position_embeddings >= 1)) {
      zt::fuzz::finding("llama3 rope_scaling accepted whose wavelengths divide by zero");
    }
    zt::fuzz::check_eos_ids(text, kSource, m.eos_token_ids);
  });
  return 0;
}
