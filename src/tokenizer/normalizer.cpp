#include "tokenizer/normalizer.h"

#include "tokenizer/unicode_text.h"

namespace zt {

struct Normalizer::Step {
  enum Kind { kPrepend, kReplace, kStrip, kForm, kLowercase, kStripAccents } kind;
  NormalForm form = NormalForm::kNFC;  // kForm's
  std::string text;              // Prepend's prefix, Replace's content
  std::unique_ptr<Regex> regex;  // Replace's pattern
  bool left = false, right = false;
};

namespace {

// HF strips char::is_whitespace; PCRE2's \s under UCP is the same White_Space set.
const Regex& leading_space() {
  static const Regex r("^\\s+", false, "(built-in)");
  return r;
}
const Regex& trailing_space() {
  static const Regex r("\\s+$", false, "(built-in)");
  return r;
}

}  // namespace

Normalizer::Normalizer(const boost::json::value& spec, const JsonWhere& where) {
  if (!spec.is_null()) add(spec, where);
}
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;

void Normalizer::add(const boost::json::value& spec, const JsonWhere& where) {
  const auto& o = json_object(spec, where);
  const std::string type = json_type(o, where);
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const auto& list = json_array(json_member(o, "normalizers"), where.at("normalizers"));
    for (size_t i = 0; i < list.size(); ++i) add(list[i], where.at("normalizers").index(i));
    return;
  } else if (type == "Prepend") {
    step->kind = Step::kPrepend;
    step->text = json_string(o, "prepend", where);
  } else if (type == "Replace") {
    step->kind = Step::kReplace;
    step->regex = tokenizer_pattern(json_member(o, "pattern"), where.at("pattern"));
    step->text = json_string(o, "content", where);
  } else if (type == "Strip") {
    step->kind = Step::kStrip;
    step->left = json_bool(o, "strip_left", where, false);
    step->right = json_bool(o, "strip_right", where, false);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step->kind = Step::kForm;
    step->form = type == "NFC" ? NormalForm::kNFC : type == "NFD" ? NormalForm::kNFD
               : type == "NFKC" ? NormalForm::kNFKC : NormalForm::kNFKD;
  } else if (type == "Lowercase") {
    step->kind = Step::kLowercase;
  } else if (type == "StripAccents") {
    step->kind = Step::kStripAccents;
  } else {
    // BertNormalizer, Precompiled (SentencePiece's charsmap), NMT: not implemented.
    unsupported(where, "normalizer", type,
                "Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents");
  }
  steps_.push_back(std::move(step));
}

std::string Normalizer::apply(std::string text) const {
  for (const auto& step : steps_) {
    switch (step->kind) {
      case Step::kPrepend:
        if (!text.empty()) text = step->text + text;  // HF prepends to non-empty text only
        break;
      case Step::kReplace:
        text = step->regex->replace_all(text, step->text);
        break;
      case Step::kStrip:
        if (step->left) {
          const auto m = leading_space().matches(text);
          if (!m.empty()) text.erase(0, m[0].second);
        }
        if (step->right) {
          const auto m = trailing_space().matches(text);
          if (!m.empty()) text.erase(m[0].first);
        }
        break;
      case Step::kForm:
        text = unicode_normalize(text, step->form);
        break;
      case Step::kLowercase:
        text = unicode_lowercase(text);
        break;
      case Step::kStripAccents:
        text = strip_combining_marks(text);
        break;
    }
  }
  return text;
}

}  // namespace zt
