// tokenizer.json's "pre_tokenizer": cuts normalized text into the words BPE sees, each merged on
// its own (so merges never cross a word). Implemented: ByteLevel (GPT-2's regex and byte
// spelling), Split (a pattern with HF's five delimiter behaviours), Metaspace (SentencePiece's
// U+2581 for spaces), Digits, Sequence.
#pragma once

#include <boost/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace zt {

struct Piece {
  std::string text;
  bool first = false;  ///< starts at the beginning of the input (Metaspace's prepend_scheme "first")
};

class PreTokenizer {
 public:
  /// `spec` is the pre-tokenizer's JSON (null: the whole piece is one word).
  PreTokenizer(const boost::json::value& spec, const JsonWhere& where);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;

  /// Replaces `pieces` with the words they split into, in order.
  void split(std::vector<Piece>& pieces) const;

 private:
  struct Step;
  void add(const boost::json::value& spec, const JsonWhere& where);
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace zt
