#include "tokenizer/unicode_text.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <vector>

#include "core/error.h"

namespace zt {
namespace {

void check(UErrorCode status, const char* what) {
  ZT_CHECK(U_SUCCESS(status), what, ": ", u_errorName(status));
}

std::u16string to_utf16(std::string_view utf8) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, utf8.data(), int32_t(utf8.size()), &status);
  if (status != U_BUFFER_OVERFLOW_ERROR) check(status, "u_strFromUTF8");
  std::u16string out(size_t(length), u'\0');
  status = U_ZERO_ERROR;
  u_strFromUTF8(out.data(), length, nullptr, utf8.data(), int32_t(utf8.size()), &status);
  check(status, "u_strFromUTF8");
  return out;
}

std::string to_utf8(const char16_t* text, int32_t length) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t bytes = 0;
  u_strToUTF8(nullptr, 0, &bytes, text, length, &status);
  if (status != U_BUFFER_OVERFLOW_ERROR) check(status, "u_strToUTF8");
  std::string out(size_t(bytes), '\0');
  status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), bytes, nullptr, text, length, &status);
  check(status, "u_strToUTF8");
  return out;
}

// Calls fn(code point, its bytes) for each code point of valid UTF-8.
template <class Fn>
void for_each_code_point(std::string_view s, Fn&& fn) {
  int32_t i = 0;
  const int32_t n = int32_t(s.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
  while (i < n) {
    const int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(bytes, i, n, c);
    fn(c, s.substr(size_t(start), size_t(i - start)));
  }
}

}  // namespace

std::string unicode_normalize(std::string_view utf8, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC: norm = unorm2_getNFCInstance(&status); break;
    case NormalForm::kNFD: norm = unorm2_getNFDInstance(&status); break;
    case NormalForm::kNFKC: norm = unorm2_getNFKCInstance(&status); break;
    case NormalForm::kNFKD: norm = unorm2_getNFKDInstance(&status); break;
  }
  check(status, "unorm2_get*Instance");
  const std::u16string in = to_utf16(utf8);
  // Already normal (the common case for NFC): no copy through the normaliser.
  if (unorm2_isNormalized(norm, in.data(), int32_t(in.size()), &status) && U_SUCCESS(status)) {
    return std::string(utf8);
  }
  status = U_ZERO_ERROR;
  const int32_t length = unorm2_normalize(norm, in.data(), int32_t(in.size()), nullptr, 0, &status);
  if (status != U_BUFFER_OVERFLOW_ERROR) check(status, "unorm2_normalize");
  std::u16string out(size_t(length), u'\0');
  status = U_ZERO_ERROR;
  unorm2_normalize(norm, in.data(), int32_t(in.size()), out.data(), length, &status);
  check(status, "unorm2_normalize");
  return to_utf8(out.data(), length);
}

std::string unicode_lowercase(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for_each_code_point(utf8, [&](UChar32 c, std::string_view bytes) {
    if (c < 0x80) {
      out.push_back(char(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
      return;
    }
    // One code point at a time: its full mapping (U+0130 has two code points) and no context.
    char16_t unit[2], lower[8];
    int32_t len = 0;
    U16_APPEND_UNSAFE(unit, len, c);
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = u_strToLower(lower, 8, unit, len, "", &status);
    if (U_FAILURE(status)) {
      out.append(bytes);
      return;
    }
    out += to_utf8(lower, n);
  });
  return out;
}

std::string strip_combining_marks(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for_each_code_point(utf8, [&](UChar32 c, std::string_view bytes) {
    if ((U_GET_GC_MASK(c) & U_GC_M_MASK) == 0) out.append(bytes);
  });
  return out;
}

}  // namespace zt
