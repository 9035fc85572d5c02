#include "tokenizer/utf8.h"

namespace zt {

namespace {

// Length of the well-formed sequence at s[i], or 0 with `*bad` set to the bytes of the maximal
// subpart to replace by one U+FFFD (Unicode Table 3-7's ranges for the second byte).
size_t well_formed(std::string_view s, size_t i, size_t* bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < need && i + k < s.size(); ++k) {
    const unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (b(i + k) < lo_k || b(i + k) > hi_k) break;
  }
  if (k == need) return need;
  *bad = k;  // the lead byte and the continuation bytes that were valid so far
  return 0;
}

}  // namespace

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  size_t i = 0, copied = 0;
  while (i < text.size()) {
    size_t bad = 0, n = well_formed(text, i, &bad);
    if (n > 0) {
      i += n;
      continue;
    }
    if (out.empty()) out.reserve(text.size() + 16);
    out.append(text.substr(copied, i - copied));
    out.append("\xEF\xBF\xBD");
    i += bad;
    copied = i;
  }
  if (copied == 0) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

uint32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k])); };
  const size_t n = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
  *len = n;
  switch (n) {
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return b(0);
  }
}

}  // namespace zt
