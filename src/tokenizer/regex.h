// A compiled PCRE2 pattern for the pre-tokenizers and normalizers of tokenizer.json (HF compiles
// them with Oniguruma; PCRE2 with UTF and UCP gives \p{L}, \s and lookahead the same meaning).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/fwd.hpp>
#include <memory>

#include "tokenizer/json_fields.h"

struct pcre2_real_code_8;

namespace zt {

class Regex {
 public:
  /// `literal` matches `pattern` as plain text (tokenizer.json's {"String": ...} patterns).
  /// A pattern PCRE2 refuses is a UsageError naming `source` and PCRE2's message.
  Regex(const std::string& pattern, bool literal, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// [begin, end) of every non-empty, non-overlapping match in `text` (valid UTF-8), left to right.
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;
  /// `text` with every match replaced by `content`.
  std::string replace_all(const std::string& text, const std::string& content) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

/// A pattern of tokenizer.json: {"String": "x"} (literal) or {"Regex": "x"}.
std::unique_ptr<Regex> tokenizer_pattern(const boost::json::value& v, const JsonWhere& where);

}  // namespace zt
