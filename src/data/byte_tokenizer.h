// The byte-level tokenizer: token id = byte value (vocab 256). Any text, any encoding.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace zt {

inline constexpr int kByteVocabSize = 256;

inline std::vector<uint16_t> byte_tokenize(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = uint16_t(static_cast<unsigned char>(text[i]));
  return tokens;
}

}  // namespace zt
