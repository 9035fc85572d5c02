// An HF tokenizer.json, run as HF's Tokenizer::encode runs it: added tokens split off first, then
// per remaining piece the normalizer, the pre-tokenizer and BPE, then the post-processor.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace zt {

class HfTokenizer final : public Tokenizer {
 public:
  /// `json` is tokenizer.json's text; `file` names it in errors. `eos_token` (from
  /// tokenizer_config.json) must be a token of the vocabulary when given.
  HfTokenizer(const std::string& json, const std::string& file, const std::optional<std::string>& eos_token);

  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const override;
  uint32_t vocab_size() const override;
  std::optional<uint32_t> eos_token_id() const override { return eos_; }
  std::optional<uint32_t> token_to_id(std::string_view token) const override;

 private:
  // The words of one piece of text that no added token covers.
  void encode_plain(std::string_view text, bool first, std::vector<uint32_t>& ids) const;

  std::optional<AddedVocabulary> added_;
  std::optional<Normalizer> normalizer_;
  std::optional<PreTokenizer> pre_tokenizer_;
  std::optional<BpeModel> model_;
  std::optional<TokenDecoder> decoder_;
  // The post-processor's single-sequence template: ids before and after the text.
  std::vector<uint32_t> prefix_, suffix_;
  std::optional<uint32_t> eos_;
  bool has_decoder_ = false;
};

}  // namespace zt
