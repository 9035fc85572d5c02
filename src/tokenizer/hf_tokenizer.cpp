#include "tokenizer/hf_tokenizer.h"

#include <boost/json.hpp>

#include "tokenizer/utf8.h"

namespace zt {

namespace {

// TemplateProcessing's "single": the ids of its special tokens before and after $A.
void read_template(const boost::json::object& o, const JsonWhere& where, std::vector<uint32_t>& prefix,
                   std::vector<uint32_t>& suffix) {
  const auto& specials = json_object(json_member(o, "special_tokens"), where.at("special_tokens"));
  const JsonWhere sw = where.at("single");
  const auto& single = json_array(json_member(o, "single"), sw);
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const auto& item = json_object(single[i], sw.index(i));
    if (item.contains("Sequence")) {
      const auto& seq = json_object(item.at("Sequence"), sw.index(i).at("Sequence"));
      if (json_string(seq, "id", sw.index(i)) != "A") sw.index(i).fail("a single-sequence template holds only $A");
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = json_string(json_object(item.at("SpecialToken"), sw.index(i)), "id", sw.index(i));
      const boost::json::value* entry = specials.if_contains(name);
      if (!entry) sw.index(i).fail(cat("special token \"", name, "\" is not in special_tokens"));
      const auto& ids = json_array(json_member(json_object(*entry, where.at("special_tokens").at(name)), "ids"),
                                   where.at("special_tokens").at(name).at("ids"));
      for (const auto& id : ids) (seen_sequence ? suffix : prefix).push_back(json_id(id, where.at("special_tokens").at(name)));
    } else {
      sw.index(i).fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
}

void read_post_processor(const boost::json::value& spec, const JsonWhere& where, std::vector<uint32_t>& prefix,
                         std::vector<uint32_t>& suffix) {
  if (spec.is_null()) return;
  const auto& o = json_object(spec, where);
  const std::string type = json_type(o, where);
  if (type == "Sequence") {
    const auto& list = json_array(json_member(o, "processors"), where.at("processors"));
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], where.at("processors").index(i), prefix, suffix);
  } else if (type == "TemplateProcessing") {
    read_template(o, where, prefix, suffix);
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets; the ids stay
    unsupported(where, "post-processor", type, "TemplateProcessing, ByteLevel, Sequence");
  }
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& json, const std::string& file, const std::optional<std::string>& eos_token) {
  boost::system::error_code ec;
  const boost::json::value root = boost::json::parse(json, ec);
  if (ec) throw UsageError(cat(file, ": not valid JSON: ", ec.message()));
  const JsonWhere top{file, ""};
  const auto& o = json_object(root, top);
  const JsonWhere mw{file, "model"};
  const auto& model = json_object(json_member(o, "model"), mw);
  const std::string type = json_string(model, "type", mw, "BPE");
  if (type != "BPE") unsupported(mw, "model", type, "BPE");
  // Order matters only for the messages: the first unsupported component named is the model's.
  model_.emplace(model, mw);
  added_.emplace(json_member(o, "added_tokens"), *model_, JsonWhere{file, "added_tokens"});
  normalizer_.emplace(json_member(o, "normalizer"), JsonWhere{file, "normalizer"});
  pre_tokenizer_.emplace(json_member(o, "pre_tokenizer"), JsonWhere{file, "pre_tokenizer"});
  decoder_.emplace(json_member(o, "decoder"), JsonWhere{file, "decoder"});
  has_decoder_ = !json_member(o, "decoder").is_null();
  read_post_processor(json_member(o, "post_processor"), JsonWhere{file, "post_processor"}, prefix_, suffix_);
  // The template's ids go into every encoding as they are: each must be a token, so that every id
  // encode() gives is below vocab_size() (HF does not check; a model would index past its rows).
  for (const auto* ids : {&prefix_, &suffix_}) {
    for (uint32_t id : *ids) {
      if (!added_->find(id) && !model_->id_to_token(id)) {
        JsonWhere{file, "post_processor"}.fail(cat("special token id ", id, " is no token of this tokenizer"));
      }
    }
  }
  // truncation and padding are ignored: a corpus is tokenized whole, never cut or padded.
  if (eos_token) {
    eos_ = token_to_id(*eos_token);
    if (!eos_) {
      throw UsageError(one_line(cat(file, ": the eos_token \"", *eos_token, "\" is not a token of this tokenizer")));
    }
  }
}

std::optional<uint32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

uint32_t HfTokenizer::vocab_size() const { return std::max(model_->id_limit(), added_->id_limit()); }

void HfTokenizer::encode_plain(std::string_view text, bool first, std::vector<uint32_t>& ids) const {
  const std::string normalized = normalizer_->apply(std::string(text));
  std::vector<Segment> segments;
  if (added_->has_normalized()) {
    segments = added_->split(normalized, /*normalized=*/true);
  } else {
    segments.push_back({normalized, std::nullopt});
  }
  std::vector<Piece> pieces;
  for (const Segment& s : segments) {
    if (s.id) {
      ids.push_back(*s.id);
      continue;
    }
    pieces.assign(1, Piece{std::string(s.text), first && s.text.data() == normalized.data()});
    pre_tokenizer_->split(pieces);
    for (const Piece& p : pieces) model_->tokenize(p.text, ids);
  }
}

std::vector<uint32_t> HfTokenizer::encode(std::string_view raw, bool add_special_tokens) const {
  const std::string text = replace_invalid_utf8(raw);
  std::vector<uint32_t> ids;
  if (add_special_tokens) ids = prefix_;
  for (const Segment& s : added_->split(text, /*normalized=*/false)) {
    if (s.id) {
      ids.push_back(*s.id);
    } else {
      encode_plain(s.text, s.text.data() == text.data(), ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    if (const AddedToken* added = added_->find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = model_->id_to_token(id)) {
      tokens.push_back(*token);
    }  // an id of no token decodes to nothing, as in HF
  }
  if (!has_decoder_) {  // HF joins with spaces when there is no decoder
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return replace_invalid_utf8(text);
  }
  return decoder_->decode(std::move(tokens));
}

}  // namespace zt
