// UTF-8 for the tokenizer: making arbitrary bytes valid text the way Python's
// bytes.decode("utf-8", errors="replace") does, and walking code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

/// `text` with every ill-formed subsequence replaced by U+FFFD, one per maximal subpart (the
/// Unicode standard's practice, which Python follows): HF tokenizers take Python strings, so this is
/// the text they would see for the same bytes. Valid input comes back unchanged.
std::string replace_invalid_utf8(std::string_view text);

/// Bytes of the UTF-8 sequence starting with lead byte `c` (1 for a continuation byte, so a
/// walk over ill-formed text still advances).
inline size_t utf8_length(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
}

/// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

/// The code point at text[i] (valid UTF-8), and its length in `len`.
uint32_t decode_utf8(std::string_view text, size_t i, size_t* len);

}  // namespace zt
