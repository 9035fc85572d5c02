// Unicode normal forms and case for tokenizer.json's normalizers, through ICU (libicu): the
// tables of every code point are a library's job, not ours.
#pragma once

#include <string>
#include <string_view>

namespace zt {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

/// `utf8` (valid UTF-8) in the normal form.
std::string unicode_normalize(std::string_view utf8, NormalForm form);
/// Each code point replaced by its full lowercase mapping on its own, as Rust's
/// char::to_lowercase (HF's Lowercase normalizer): no context rules (a final Σ becomes σ).
std::string unicode_lowercase(std::string_view utf8);
/// Without the combining marks (general category M: Mn, Mc and Me), as HF's StripAccents
/// (unicode-normalization's is_combining_mark).
std::string strip_combining_marks(std::string_view utf8);

}  // namespace zt
