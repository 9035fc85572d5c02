// tokenizer.json's "normalizer": rewrites of the text before pre-tokenization (SentencePiece-style
// tokenizers spell spaces as U+2581 here). Implemented: Sequence, Prepend, Replace, Strip, the
// Unicode normal forms NFC, NFD, NFKC, NFKD, Lowercase and StripAccents (unicode_text.h, ICU).
#pragma once

#include <boost/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace zt {

class Normalizer {
 public:
  /// `spec` is the normalizer's JSON (null: the identity). Unsupported types are refused by name.
  Normalizer(const boost::json::value& spec, const JsonWhere& where);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string text) const;

 private:
  struct Step;
  void add(const boost::json::value& spec, const JsonWhere& where);
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace zt
