// Fuzz harness: an HF model folder's generation_config.json (parse_generation_config,
// config/generation_config.h) on any bytes. Built twice from this file: with fuzz_driver.cpp as a
// ctest test (seeded mutations of corpus/generation_config/), and with ZT_FUZZ=ON as a libFuzzer
// target.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/generation_config.h"
#include "fuzz_check.h"
#include "fuzz_eos_ids.h"

namespace {

constexpr const char* kSource = "fuzz/generation_config.json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  zt::fuzz::check_reader(kSource, [&] {
    const zt::GenerationConfig g = zt::parse_generation_config(text, kSource);
    // zero_generate takes these as its flags' defaults: each in the range its flag allows a value
    // to come from the file in (temperature and top_p then checked > 0 with the flags').
    if ((g.temperature && !(*g.temperature >= 0 && std::isfinite(*g.temperature))) ||
        (g.top_p && !(*g.top_p >= 0 && *g.top_p <= 1)) || (g.top_k && *g.top_k < 0) ||
        (g.max_new_tokens && *g.max_new_tokens < 1)) {
      zt::fuzz::finding("a sampling setting accepted out of range");
    }
    zt::fuzz::check_eos_ids(text, kSource, g.eos_token_ids);
  });
  return 0;
}
