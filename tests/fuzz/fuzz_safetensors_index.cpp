// Fuzz harness: a sharded model's model.safetensors.index.json (parse_safetensors_index,
// checkpoint/safetensors.h) on any bytes. Built twice from this file: with fuzz_driver.cpp as a
// ctest test (seeded mutations of corpus/safetensors_index/), and with ZT_FUZZ=ON as a libFuzzer
// target.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr const char* kSource = "fuzz/model.safetensors.index.json";
  zt::fuzz::check_reader(kSource, [&] {
    const std::vector<std::string> files = zt::parse_safetensors_index(text, kSource);
    // The reader opens each name under the model's folder: at least one, each once, and none
    // that leads out of the folder (absolute, or through "..").
    if (files.empty()) zt::fuzz::finding("an index accepted that names no file");
    if (!std::is_sorted(files.begin(), files.end()) ||
        std::adjacent_find(files.begin(), files.end()) != files.end()) {
      zt::fuzz::finding("the index's files are not listed each once, sorted");
    }
    for (const std::string& file : files) {
      const std::filesystem::path p(file);
      if (file.empty() || p.is_absolute() || file.find('\0') != std::string::npos) {
        zt::fuzz::finding("an index accepted that names \"" + file + "\"");
      }
      for (const auto& part : p) {
        if (part == "..") zt::fuzz::finding("an index accepted that names a file outside the folder: " + file);
      }
    }
  });
  return 0;
}
