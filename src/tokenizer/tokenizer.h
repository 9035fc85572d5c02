// Text to token ids and back, from an HF tokenizer.json (load_tokenizer), so that data
// preparation and generation read what users already have next to their model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The ids of `text` (any bytes: ill-formed UTF-8 is first replaced as Python's
  /// decode(errors="replace") does). add_special_tokens applies the post-processor (a BOS, for
  /// Llama), as HF's encode does by default.
  virtual std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  /// The text of `ids` (valid UTF-8), without special tokens when asked.
  virtual std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const = 0;
  /// One past the largest id the tokenizer can produce.
  virtual uint32_t vocab_size() const = 0;
  /// The end-of-text token (from tokenizer_config.json's eos_token), when there is one.
  virtual std::optional<uint32_t> eos_token_id() const = 0;
  /// The id of a token (an added token or one of the model's vocabulary), when it is one.
  virtual std::optional<uint32_t> token_to_id(std::string_view token) const = 0;
};

/// `path` is an HF model or tokenizer folder (its tokenizer.json, and tokenizer_config.json when
/// present, for the EOS token) or a tokenizer.json itself. A component zerotrain does not
/// implement is a UsageError naming the file, the component and its type.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace zt
