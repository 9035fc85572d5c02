// GPT-2's byte-to-unicode table: byte-level BPE vocabularies spell every byte as a printable
// character (the 188 printable Latin-1 bytes as themselves, the rest as U+0100 upwards), so that
// a token is a string with no spaces or control characters. GPT-2, Llama 3 and Qwen2 share it.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace zt {

/// The UTF-8 spelling of each byte.
const std::array<std::string, 256>& byte_level_chars();

/// `bytes` spelled with byte_level_chars.
std::string to_byte_level(std::string_view bytes);

/// The bytes a byte-level spelling stands for; false (and `out` unspecified) when `text` holds a
/// character outside the table.
bool from_byte_level(std::string_view text, std::string& out);

}  // namespace zt
