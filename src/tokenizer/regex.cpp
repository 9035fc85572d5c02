#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "config/json_section.h"
#include "core/error.h"
#include "tokenizer/utf8.h"

namespace zt {

Regex::Regex(const std::string& pattern, bool literal, const std::string& source) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2 refuses UCP beside LITERAL (a literal has no classes for it to change).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw UsageError(one_line(cat(source, ": pattern \"", pattern, "\" does not compile at offset ", offset, ": ",
                                  reinterpret_cast<const char*>(message))));
  }
  // JIT makes matching several times faster; where it is unavailable the interpreter still works.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::matches(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  std::vector<std::pair<size_t, size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // The text was made valid UTF-8 before pre-tokenization: skip PCRE2's check of the whole
    // subject, which it would otherwise repeat at every call.
    const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    ZT_CHECK(rc >= 0, "pcre2_match failed with code ", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: move on by one character, as the Rust regex iterators do
      if (begin >= text.size()) break;
      start = begin + utf8_length(static_cast<unsigned char>(text[begin]));
    }
  }
  return out;
}

std::string Regex::replace_all(const std::string& text, const std::string& content) const {
  std::string out;
  size_t copied = 0;
  for (const auto& [begin, end] : matches(text)) {
    out.append(text, copied, begin - copied);
    out += content;
    copied = end;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

std::unique_ptr<Regex> tokenizer_pattern(const boost::json::value& v, const JsonWhere& where) {
  const auto& o = json_object(v, where);
  if (o.contains("String")) return std::make_unique<Regex>(json_string(o, "String", where), true, where.file);
  if (o.contains("Regex")) return std::make_unique<Regex>(json_string(o, "Regex", where), false, where.file);
  where.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace zt
