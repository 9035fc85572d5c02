// tokenizer.json's "decoder": token strings back to text. Implemented: ByteLevel (byte-level BPE),
// and the SentencePiece chain Replace (U+2581 to space), ByteFallback (<0xXX> tokens to bytes),
// Fuse, Strip; Metaspace; Sequence. The result is valid UTF-8: bytes that do not form text become
// U+FFFD, as HF's from_utf8_lossy.
#pragma once

#include <boost/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace zt {

class TokenDecoder {
 public:
  /// `spec` null: the tokens are concatenated.
  TokenDecoder(const boost::json::value& spec, const JsonWhere& where);
  ~TokenDecoder();
  TokenDecoder(TokenDecoder&&) noexcept;

  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step;
  void add(const boost::json::value& spec, const JsonWhere& where);
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace zt
