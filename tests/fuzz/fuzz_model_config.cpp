// Fuzz harness: the HF config.json reader (parse_model_config, config/model_config.h) on any
// bytes. Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded mutations of
// corpus/model_config/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  zt::fuzz::check_reader("fuzz/config.json", [&] {
    const zt::ModelConfig m = zt::parse_model_config(text, "fuzz/config.json");
    // An accepted config builds a model: every size positive and the heads dividing the width.
    if (m.n_layer < 1 || m.n_embd < 1 || m.n_head < 1 || m.n_positions < 1 || m.vocab_size < 1 ||
        m.n_embd % m.n_head != 0) {
      zt::fuzz::finding("a config accepted that no model can have");
    }
  });
  return 0;
}
