#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "tokenizer/byte_level.h"

namespace zt {

namespace {

// GPT-2's pre-tokenizer regex, as HF's ByteLevel uses it with use_regex.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name, const JsonWhere& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  unsupported(where, "behavior", name, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

struct Span {
  size_t begin, end;
  bool match;
};

// HF's NormalizedString::split: the text as spans of matches and gaps, then the behaviour folds
// delimiters into their neighbours; empty spans are dropped.
void split_piece(const Piece& piece, const Regex& pattern, Behavior behavior, bool invert, std::vector<Piece>& out) {
  const std::string& t = piece.text;
  std::vector<Span> spans;
  size_t at = 0;
  for (const auto& [b, e] : pattern.matches(t)) {
    if (b > at) spans.push_back({at, b, invert});
    spans.push_back({b, e, !invert});
    at = e;
  }
  if (at < t.size()) spans.push_back({at, t.size(), invert});

  std::vector<Span> folded;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      folded = std::move(spans);
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) folded.push_back(s);
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !folded.empty()) {
          folded.back().end = s.end;
        } else {
          folded.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.match && !previous_match && !folded.empty()) {
          folded.back().begin = s.begin;
        } else {
          folded.push_back(s);
        }
        previous_match = s.match;
      }
      std::reverse(folded.begin(), folded.end());
      break;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !folded.empty()) {
          folded.back().end = s.end;
        } else {
          folded.push_back(s);
        }
        previous_match = s.match;
      }
      break;
  }
  for (const Span& s : folded) {
    if (s.end > s.begin) out.push_back({t.substr(s.begin, s.end - s.begin), piece.first && s.begin == 0});
  }
}

}  // namespace

struct PreTokenizer::Step {
  enum Kind { kByteLevel, kSplit, kMetaspace } kind;
  std::unique_ptr<Regex> pattern;  // Split's, ByteLevel's with use_regex, Metaspace's replacement
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  std::string prepend_scheme;     // Metaspace: always, first, never
  bool split = true;              // Metaspace

  void run(std::vector<Piece>& pieces) const {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (Piece& p : pieces) {
      switch (kind) {
        case kSplit:
          split_piece(p, *pattern, behavior, invert, out);
          break;
        case kByteLevel: {
          if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;  // (not insert: GCC 12 warns falsely of an overlap)
          const size_t from = out.size();
          if (pattern) {
            split_piece(p, *pattern, Behavior::kIsolated, false, out);
          } else {
            out.push_back(std::move(p));
          }
          for (size_t i = from; i < out.size(); ++i) out[i].text = to_byte_level(out[i].text);
          break;
        }
        case kMetaspace: {
          std::string text;
          text.reserve(p.text.size() + replacement.size());
          for (char c : p.text) {
            if (c == ' ') {
              text += replacement;
            } else {
              text += c;
            }
          }
          // HF replaces spaces first, then prepends unless the piece already starts with one.
          const bool prepend = prepend_scheme == "always" || (prepend_scheme == "first" && p.first);
          if (prepend && text.compare(0, replacement.size(), replacement) != 0) text.insert(0, replacement);
          Piece spelled{std::move(text), p.first};
          if (split) {
            split_piece(spelled, *pattern, Behavior::kMergedWithNext, false, out);
          } else {
            out.push_back(std::move(spelled));
          }
          break;
        }
      }
    }
    pieces = std::move(out);
  }
};

PreTokenizer::PreTokenizer(const boost::json::value& spec, const JsonWhere& where) {
  if (!spec.is_null()) add(spec, where);
}
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

void PreTokenizer::add(const boost::json::value& spec, const JsonWhere& where) {
  const auto& o = json_object(spec, where);
  const std::string type = json_type(o, where);
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const auto& list = json_array(json_member(o, "pretokenizers"), where.at("pretokenizers"));
    for (size_t i = 0; i < list.size(); ++i) add(list[i], where.at("pretokenizers").index(i));
    return;
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
    step->add_prefix_space = json_bool(o, "add_prefix_space", where, true);
    if (json_bool(o, "use_regex", where, true)) step->pattern = std::make_unique<Regex>(kGpt2Pattern, false, where.file);
  } else if (type == "Split") {
    step->kind = Step::kSplit;
    step->pattern = tokenizer_pattern(json_member(o, "pattern"), where.at("pattern"));
    step->behavior = parse_behavior(json_string(o, "behavior", where), where.at("behavior"));
    step->invert = json_bool(o, "invert", where, false);
  } else if (type == "Digits") {
    // HF splits on char::is_numeric (\p{N}): one word per digit, or per run of digits.
    step->kind = Step::kSplit;
    const bool individual = json_bool(o, "individual_digits", where, false);
    step->pattern = std::make_unique<Regex>(individual ? "\\p{N}" : "\\p{N}+", false, where.file);
    step->behavior = Behavior::kIsolated;
  } else if (type == "Metaspace") {
    step->kind = Step::kMetaspace;
    step->replacement = json_char(o, "replacement", where, "\xE2\x96\x81");
    // Older files say add_prefix_space instead of prepend_scheme.
    const bool legacy_prefix = json_bool(o, "add_prefix_space", where, true);
    step->prepend_scheme = json_string(o, "prepend_scheme", where, legacy_prefix ? "always" : "never");
    if (step->prepend_scheme != "always" && step->prepend_scheme != "first" && step->prepend_scheme != "never") {
      unsupported(where.at("prepend_scheme"), "prepend_scheme", step->prepend_scheme, "always, first, never");
    }
    step->split = json_bool(o, "split", where, true);
    step->pattern = std::make_unique<Regex>(step->replacement, true, where.file);
  } else {
    unsupported(where, "pre-tokenizer", type, "ByteLevel, Split, Metaspace, Digits, Sequence");
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) step->run(pieces);
}

}  // namespace zt
