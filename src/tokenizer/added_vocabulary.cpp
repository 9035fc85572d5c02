#include "tokenizer/added_vocabulary.h"

#include "core/log.h"
#include "tokenizer/utf8.h"

namespace zt {

namespace {

// HF's single_word test: a character that is alphanumeric or '_' (ASCII here; a non-ASCII
// neighbour counts as a word character, which is what Unicode letters are).
bool is_word_byte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

AddedVocabulary::AddedVocabulary(const boost::json::value& spec, const BpeModel& model, const JsonWhere& where) {
  if (spec.is_null()) return;
  const auto& list = json_array(spec, where);
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonWhere w = where.index(i);
    const auto& o = json_object(list[i], w);
    AddedToken t;
    const uint32_t file_id = json_id(json_member(o, "id"), w.at("id"));
    t.content = json_string(o, "content", w);
    if (t.content.empty()) w.at("content").fail("an added token cannot be empty");
    if (by_content_.count(t.content)) continue;  // HF adds a content once
    // AddedVocabulary::add_tokens: the model's id, else the next id past the vocabulary.
    if (auto id = model.token_to_id(t.content)) {
      t.id = *id;
    } else {
      t.id = next_id_ >= model.vocab_entries() ? next_id_ : uint32_t(model.vocab_entries());
    }
    if (t.id != file_id) {
      log_warn(where.file, ": added token \"", t.content, "\" has id ", file_id, " in the file but ", t.id,
               " as HF loads it; using ", t.id);
    }
    t.single_word = json_bool(o, "single_word", w, false);
    t.lstrip = json_bool(o, "lstrip", w, false);
    t.rstrip = json_bool(o, "rstrip", w, false);
    t.normalized = json_bool(o, "normalized", w, false);
    t.special = json_bool(o, "special", w, false);
    has_normalized_ = has_normalized_ || t.normalized;
    id_limit_ = std::max(id_limit_, t.id + 1);
    if (!model.token_to_id(t.content)) next_id_ = std::max(next_id_, t.id + 1);
    by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(tokens_.size());
    by_id_[t.id] = tokens_.size();
    by_content_[t.content] = t.id;
    tokens_.push_back(std::move(t));
  }
}

const AddedToken* AddedVocabulary::find(uint32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<uint32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized) const {
  std::vector<Segment> out;
  size_t gap = 0;  // start of the text not yet emitted
  size_t i = 0;
  while (i < text.size()) {
    // The longest token matching at i (leftmost-longest).
    const AddedToken* best = nullptr;
    for (size_t k : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = tokens_[k];
      if (t.normalized != normalized || t.content.size() > text.size() - i) continue;
      if ((!best || t.content.size() > best->content.size()) && text.compare(i, t.content.size(), t.content) == 0) {
        if (t.single_word) {
          const size_t end = i + t.content.size();
          const bool before = i > 0 && is_word_byte(static_cast<unsigned char>(text[i - 1]));
          const bool after = end < text.size() && is_word_byte(static_cast<unsigned char>(text[end]));
          if (before || after) continue;
        }
        best = &t;
      }
    }
    if (!best) {
      i += utf8_length(static_cast<unsigned char>(text[i]));
      continue;
    }
    size_t begin = i, end = i + best->content.size();
    if (best->lstrip) {
      while (begin > gap && is_space(static_cast<unsigned char>(text[begin - 1]))) --begin;
    }
    if (best->rstrip) {
      while (end < text.size() && is_space(static_cast<unsigned char>(text[end]))) ++end;
    }
    if (begin > gap) out.push_back({text.substr(gap, begin - gap), std::nullopt});
    out.push_back({text.substr(begin, end - begin), best->id});
    gap = i = end;
  }
  if (gap < text.size()) out.push_back({text.substr(gap), std::nullopt});
  return out;
}

}  // namespace zt
