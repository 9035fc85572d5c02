#include "tokenizer/byte_level.h"

#include <unordered_map>

#include "tokenizer/utf8.h"

namespace zt {

namespace {

std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

const std::unordered_map<uint32_t, unsigned char>& code_point_bytes() {
  static const auto table = [] {
    std::unordered_map<uint32_t, unsigned char> m;
    const auto cp = byte_code_points();
    for (uint32_t b = 0; b < 256; ++b) m[cp[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  return table;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const auto table = [] {
    std::array<std::string, 256> chars;
    const auto cp = byte_code_points();
    for (size_t b = 0; b < 256; ++b) append_utf8(chars[b], cp[b]);
    return chars;
  }();
  return table;
}

std::string to_byte_level(std::string_view bytes) {
  const auto& chars = byte_level_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += chars[b];
  return out;
}

bool from_byte_level(std::string_view text, std::string& out) {
  const auto& table = code_point_bytes();
  out.clear();
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    auto it = table.find(decode_utf8(text, i, &len));
    if (it == table.end()) return false;
    out += char(it->second);
  }
  return true;
}

}  // namespace zt
