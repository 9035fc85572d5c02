#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace zt {

struct TokenDecoder::Step {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::unique_ptr<Regex> pattern;  // Replace
  std::string content;             // Replace's content, Strip's content, Metaspace's replacement
  size_t start = 0, stop = 0;      // Strip
  bool prepend = true;             // Metaspace: the first token's spaces came from a prepend

  void run(std::vector<std::string>& tokens) const {
    switch (kind) {
      case kByteLevel: {
        // Each token's characters back to bytes; a token outside the table (an added token
        // with plain text) stays as it is. HF joins first, so do we.
        std::string bytes, all;
        for (const std::string& t : tokens) all += from_byte_level(t, bytes) ? bytes : t;
        tokens.assign(1, replace_invalid_utf8(all));
        break;
      }
      case kReplace:
        for (std::string& t : tokens) t = pattern->replace_all(t, content);
        break;
      case kByteFallback: {
        // Runs of <0xXX> tokens become their bytes, decoded together; an invalid run gives
        // one U+FFFD per byte, as HF's ByteFallback.
        std::vector<std::string> out;
        std::string pending;
        size_t pending_count = 0;
        auto flush = [&] {
          if (pending_count == 0) return;
          const std::string text = replace_invalid_utf8(pending);
          if (text == pending) {
            out.push_back(pending);
          } else {
            for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
          pending_count = 0;
        };
        for (std::string& t : tokens) {
          unsigned value = 0;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2x", &value) == 1) {
            pending += char(value);
            ++pending_count;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case kStrip:
        for (std::string& t : tokens) {
          size_t begin = 0, end = t.size();
          // HF strips `content` characters: up to `start` from the left, `stop` from the right.
          for (size_t k = 0; k < start && t.compare(begin, content.size(), content) == 0; ++k) begin += content.size();
          for (size_t k = 0; k < stop && end >= begin + content.size() &&
                             t.compare(end - content.size(), content.size(), content) == 0;
               ++k) {
            end -= content.size();
          }
          t = t.substr(begin, end - begin);
        }
        break;
      case kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, content.size(), content) == 0) {
              // HF drops every replacement of the first token, not only a leading one.
              if (!(i == 0 && prepend)) out += ' ';
              k += content.size();
            } else {
              out += t[k++];
            }
          }
          tokens[i] = std::move(out);
        }
        break;
    }
  }
};

TokenDecoder::TokenDecoder(const boost::json::value& spec, const JsonWhere& where) {
  if (!spec.is_null()) add(spec, where);
}
TokenDecoder::~TokenDecoder() = default;
TokenDecoder::TokenDecoder(TokenDecoder&&) noexcept = default;

void TokenDecoder::add(const boost::json::value& spec, const JsonWhere& where) {
  const auto& o = json_object(spec, where);
  const std::string type = json_type(o, where);
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const auto& list = json_array(json_member(o, "decoders"), where.at("decoders"));
    for (size_t i = 0; i < list.size(); ++i) add(list[i], where.at("decoders").index(i));
    return;
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
  } else if (type == "Replace") {
    step->kind = Step::kReplace;
    step->pattern = tokenizer_pattern(json_member(o, "pattern"), where.at("pattern"));
    step->content = json_string(o, "content", where);
  } else if (type == "ByteFallback") {
    step->kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    step->kind = Step::kFuse;
  } else if (type == "Strip") {
    step->kind = Step::kStrip;
    step->content = json_char(o, "content", where);
    for (auto [key, out] : {std::pair{"start", &step->start}, std::pair{"stop", &step->stop}}) {
      const boost::json::value* v = o.if_contains(key);
      if (v && !v->is_null()) *out = json_id(*v, where.at(key));
    }
  } else if (type == "Metaspace") {
    step->kind = Step::kMetaspace;
    step->content = json_char(o, "replacement", where, "\xE2\x96\x81");
    const bool legacy_prefix = json_bool(o, "add_prefix_space", where, true);
    step->prepend = json_string(o, "prepend_scheme", where, legacy_prefix ? "always" : "never") != "never";
  } else {
    unsupported(where, "decoder", type, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
  steps_.push_back(std::move(step));
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  for (const auto& step : steps_) step->run(tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return replace_invalid_utf8(text);
}

}  // namespace zt
