// tokenizer.json's "added_tokens": strings matched whole in the text before anything else runs
// (<|endoftext|>, <s>, chat markers), so they never reach the normalizer or BPE. Matching is
// leftmost-longest, as HF's; lstrip/rstrip take the whitespace beside a match into it,
// single_word requires no word character beside it. Tokens with normalized=false match the raw
// text; normalized=true ones match the text after the normalizer.
//
// Ids are HF's, not the file's: HF re-adds the tokens when it loads tokenizer.json, so a token of
// the model's vocabulary keeps that id and any other takes the next free one past the vocabulary
// (tokenizers/src/tokenizer/serialization.rs warns when that differs from the file; so do we).
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/json_fields.h"

namespace zt {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

/// A piece of text: either an added token's id, or text for the rest of the pipeline.
struct Segment {
  std::string_view text;
  std::optional<uint32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(const boost::json::value& spec, const BpeModel& model, const JsonWhere& where);

  /// Cuts `text` at the matches of the tokens whose `normalized` flag equals the argument.
  std::vector<Segment> split(std::string_view text, bool normalized) const;
  bool has_normalized() const { return has_normalized_; }

  const AddedToken* find(uint32_t id) const;
  std::optional<uint32_t> token_to_id(std::string_view content) const;
  uint32_t id_limit() const { return id_limit_; }

 private:
  std::vector<AddedToken> tokens_;
  std::vector<size_t> by_first_byte_[256];  // the tokens starting with each byte
  std::unordered_map<uint32_t, size_t> by_id_;
  std::unordered_map<std::string, uint32_t> by_content_;
  bool has_normalized_ = false;
  uint32_t id_limit_ = 0;
  uint32_t next_id_ = 0;  // one past the largest id given to a token outside the model's vocabulary
};

}  // namespace zt
