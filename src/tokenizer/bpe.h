// tokenizer.json's "model" of type BPE: a vocabulary and ranked merges, applied to each word the
// pre-tokenizer produced. Covers byte-level BPE (GPT-2, Llama 3, Qwen2: every byte is in the
// vocabulary) and SentencePiece-style BPE (Llama 2, Mistral: characters, with <0xXX> byte tokens
// for anything else when byte_fallback is set).
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fields.h"

namespace zt {

/// Hashes std::string and std::string_view alike, so that maps keyed by std::string are searched
/// with a string_view (C++20 heterogeneous lookup) without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  BpeModel(const boost::json::object& spec, const JsonWhere& where);

  /// Appends the ids of `word`.
  void tokenize(std::string_view word, std::vector<uint32_t>& ids) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  /// The token of `id`, or null when the vocabulary has no such id.
  const std::string* id_to_token(uint32_t id) const;
  /// One past the largest id in the vocabulary (at most 2^31 - 1: ids are int32 in a model).
  uint32_t id_limit() const { return id_limit_; }
  /// The vocabulary's entries (HF's get_vocab_size, where added tokens start).
  size_t vocab_entries() const { return vocab_.size(); }

 private:
  void merge(std::string_view word, std::vector<uint32_t>& ids) const;

  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> vocab_;
  // By id, a map rather than a vector: the file's ids need not be dense, and one id of 2^31 must
  // not cost 2^31 strings.
  std::unordered_map<uint32_t, std::string> id_to_token_;
  uint32_t id_limit_ = 0;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;
  std::optional<uint32_t> unk_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  uint32_t byte_tokens_[256] = {};  // <0xXX>'s id, when byte_fallback
  bool all_byte_tokens_ = false;

  // Words repeat (Zipf): their ids are cached, as HF's BPE does, up to a bound. Each thread keeps
  // its own cache of this model's words (bpe.cpp's thread_cache, found by serial_): with one
  // cache shared behind a shared_mutex, two threads encoded slower than one.
  static constexpr size_t kCacheLimit = 1 << 16;  // words per thread
  uint64_t serial_;
};

}  // namespace zt
