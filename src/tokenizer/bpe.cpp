#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "config/json_section.h"
#include "tokenizer/utf8.h"

namespace zt {

namespace {

uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

using WordCache = std::unordered_map<std::string, std::vector<uint32_t>, StringHash, std::equal_to<>>;

// This thread's cache of the words of the model numbered `serial`. A process rarely holds more
// than one tokenizer: a few slots per thread, the oldest reused (and emptied) for a new model.
WordCache& thread_cache(uint64_t serial) {
  struct Slot {
    uint64_t serial = 0;
    WordCache words;
  };
  thread_local std::array<Slot, 4> slots;
  thread_local size_t next = 0;
  for (Slot& slot : slots) {
    if (slot.serial == serial) return slot.words;
  }
  Slot& slot = slots[next++ % slots.size()];
  slot.serial = serial;
  WordCache().swap(slot.words);  // frees the previous model's words
  return slot.words;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

BpeModel::BpeModel(const boost::json::object& o, const JsonWhere& where) : serial_(next_serial++) {
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const boost::json::value* v = o.if_contains(key);
    const bool off = !v || v->is_null() || (v->is_string() && v->get_string().empty());
    if (!off) where.at(key).fail(cat(describe_json(*v), " is not supported (only null)"));
  }
  byte_fallback_ = json_bool(o, "byte_fallback", where, false);
  fuse_unk_ = json_bool(o, "fuse_unk", where, false);
  ignore_merges_ = json_bool(o, "ignore_merges", where, false);

  const JsonWhere vw = where.at("vocab");
  const auto& vocab = json_object(json_member(o, "vocab"), vw);
  vocab_.reserve(vocab.size());
  id_to_token_.reserve(vocab.size());
  for (const auto& [token, id_value] : vocab) {
    const uint32_t id = json_id(id_value, vw.at(token));
    // Token ids become int32 (a model's input, a shard's check against vocab_size): one past the
    // largest must fit too.
    if (id >= uint32_t(INT32_MAX)) vw.at(token).fail(cat("id ", id, " is past the largest supported, 2^31 - 2"));
    const auto [it, added] = id_to_token_.emplace(id, token);
    if (!added) vw.at(token).fail(cat("id ", id, " is also \"", it->second, "\""));
    id_limit_ = std::max(id_limit_, id + 1);
    vocab_.emplace(std::string(token), id);
  }

  const JsonWhere mw = where.at("merges");
  const auto& merges = json_array(json_member(o, "merges"), mw);
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string left, right;
    const boost::json::value& m = merges[rank];
    if (m.is_string()) {  // "a b", the form tokenizers before 0.20 write
      const std::string_view s = m.get_string();
      const size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        mw.index(rank).fail(cat("\"", s, "\" is not two tokens separated by one space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.get_array().size() == 2 && m.get_array()[0].is_string() &&
               m.get_array()[1].is_string()) {  // ["a", "b"], since 0.20
      left = m.get_array()[0].get_string();
      right = m.get_array()[1].get_string();
    } else {
      mw.index(rank).fail("expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto l = token_to_id(left), r = token_to_id(right), merged = token_to_id(left + right);
    if (!l || !r || !merged) mw.index(rank).fail(cat("\"", left, "\" + \"", right, "\": a token is not in the vocab"));
    merges_.emplace(pair_key(*l, *r), std::make_pair(uint32_t(rank), *merged));
  }

  const std::string unk = json_string(o, "unk_token", where, "");
  if (!unk.empty()) {
    unk_ = token_to_id(unk);
    if (!unk_) where.at("unk_token").fail(cat("\"", unk, "\" is not in the vocab"));
  }
  if (byte_fallback_) {
    all_byte_tokens_ = true;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const auto id = token_to_id(name);
      all_byte_tokens_ = all_byte_tokens_ && id.has_value();
      byte_tokens_[b] = id.value_or(0);
    }
  }
}

std::optional<uint32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(uint32_t id) const {
  const auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<uint32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // Llama 3: a word that is a token is that token, whatever the merges say
    if (auto id = token_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }
  WordCache& cache = thread_cache(serial_);
  if (auto it = cache.find(word); it != cache.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<uint32_t> word_ids;
  merge(word, word_ids);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  if (cache.size() >= kCacheLimit) cache.clear();
  cache.emplace(std::string(word), std::move(word_ids));
}

void BpeModel::merge(std::string_view word, std::vector<uint32_t>& symbols) const {
  // One symbol per character, or its bytes' <0xXX> tokens, or the unknown token (fused with an
  // unknown neighbour when fuse_unk), as HF's BPE::merge_word.
  bool last_was_unk = false;
  for (size_t i = 0, len = 0; i < word.size(); i += len) {
    len = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    if (auto id = token_to_id(word.substr(i, len))) {
      symbols.push_back(*id);
      last_was_unk = false;
    } else if (byte_fallback_ && all_byte_tokens_) {
      for (size_t k = 0; k < len; ++k) symbols.push_back(byte_tokens_[static_cast<unsigned char>(word[i + k])]);
      last_was_unk = false;
    } else if (unk_) {
      if (!(fuse_unk_ && last_was_unk)) symbols.push_back(*unk_);
      last_was_unk = true;
    }
  }
  // Merge the lowest-ranked adjacent pair, leftmost first, until none is in the merges.
  while (symbols.size() > 1) {
    uint32_t best_rank = UINT32_MAX, best_id = 0;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best = i;
      }
    }
    if (best_rank == UINT32_MAX) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + long(best) + 1);
  }
}

}  // namespace zt
