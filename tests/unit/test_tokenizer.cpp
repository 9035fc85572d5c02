// The tokenizer's pieces on inputs small enough to work out by hand (tests/integration/
// tokenizers.sh compares whole tokenizers with HF's); here under the sanitizers too.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "tokenizer/utf8.h"

namespace zt {
namespace {

// Python's bytes.decode("utf-8", errors="replace") gives these: one U+FFFD per maximal
// ill-formed subpart (a truncated sequence is one; a byte that cannot start one is one each).
TEST(Utf8, ReplacesAsPythonDoes) {
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(replace_invalid_utf8("plain \xC3\xA9 text"), "plain \xC3\xA9 text");
  EXPECT_EQ(replace_invalid_utf8("a\xFF" "b"), "a" + R + "b");
  EXPECT_EQ(replace_invalid_utf8("cut \xE6\x97"), "cut " + R);                 // 2 of 3 bytes
  EXPECT_EQ(replace_invalid_utf8("\xF0\x9F\x98 x"), R + " x");                 // 3 of 4 bytes
  EXPECT_EQ(replace_invalid_utf8("\xC0\xAF"), R + R);                          // overlong
  EXPECT_EQ(replace_invalid_utf8("\xED\xA0\x80"), R + R + R);                  // a surrogate
  EXPECT_EQ(replace_invalid_utf8("\xF4\x90\x80\x80"), R + R + R + R);          // past U+10FFFF
  EXPECT_EQ(replace_invalid_utf8("\xE2\x82"), R);
  EXPECT_EQ(replace_invalid_utf8("\x80\x80"), R + R);                          // stray continuations
}

// Byte-level BPE: "aab ab" pre-tokenizes to "aab" and "Ġab"; merge 0 (a b) then merge 1 (Ġ ab).
constexpr const char* kTiny = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 5, "content": "<eos>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4},
            "merges": ["a b", "\u0120 ab"]}
})";

TEST(HfTokenizer, ByteLevelBpeByHand) {
  HfTokenizer tok(kTiny, "tiny.json", std::string("<eos>"));
  EXPECT_EQ(tok.encode("aab ab"), (std::vector<uint32_t>{0, 3, 4}));
  EXPECT_EQ(tok.encode("aab<eos>ab"), (std::vector<uint32_t>{0, 3, 5, 3}));
  EXPECT_EQ(tok.decode({0, 3, 4, 5}), "aab ab<eos>");
  EXPECT_EQ(tok.decode({0, 3, 4, 5}, /*skip_special_tokens=*/true), "aab ab");
  EXPECT_EQ(tok.vocab_size(), 6u);
  EXPECT_EQ(tok.eos_token_id(), 5u);
  // A character outside the vocabulary, with neither byte_fallback nor unk_token, vanishes as in
  // HF, and its neighbours then merge: "acb" is "ab".
  EXPECT_EQ(tok.encode("acb"), (std::vector<uint32_t>{3}));
}

// HF renumbers added tokens as it loads them: a model token keeps its id, another takes the next
// id past the vocabulary, whatever the file says (values from the tokenizers package).
TEST(HfTokenizer, AddedTokenIdsAreHfs) {
  std::string json = kTiny;
  const std::string extra = R"(, {"id": 42, "content": "<x>", "special": false}, {"id": 43, "content": "ab", "special": false}])";
  json.replace(json.find("}],"), 3, "}" + extra + ",");
  HfTokenizer tok(json, "tiny.json", std::nullopt);
  EXPECT_EQ(tok.token_to_id("<x>"), 6u);
  EXPECT_EQ(tok.token_to_id("ab"), 3u);
  EXPECT_EQ(tok.encode("ab<x>aab"), (std::vector<uint32_t>{3, 6, 0, 3}));  // "ab" matches whole, inside "aab" too
  EXPECT_EQ(tok.vocab_size(), 7u);
}

std::string error_of(const std::string& json, const std::optional<std::string>& eos = std::nullopt) {
  try {
    HfTokenizer tok(json, "t.json", eos);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string edited(const std::string& from, const std::string& to) {
  std::string s = kTiny;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(HfTokenizer, RefusesWhatItDoesNotImplementByName) {
  std::string e = error_of(edited(R"("type": "BPE")", R"("type": "Unigram")"));
  EXPECT_NE(e.find("t.json: model: model \"Unigram\" is not supported"), std::string::npos) << e;
  e = error_of(edited(R"("normalizer": null)", R"("normalizer": {"type": "BertNormalizer"})"));
  EXPECT_NE(e.find("t.json: normalizer: normalizer \"BertNormalizer\" is not supported"), std::string::npos) << e;
  e = error_of(edited(R"("post_processor": null)", R"("post_processor": {"type": "BertProcessing"})"));
  EXPECT_NE(e.find("t.json: post_processor: post-processor \"BertProcessing\" is not supported"), std::string::npos) << e;
  e = error_of(edited(R"("dropout": null)", R"("dropout": 0.1)"));
  EXPECT_NE(e.find("t.json: model.dropout: 0.1 is not supported"), std::string::npos) << e;
  e = error_of(edited(R"("\u0120 ab"])", R"("\u0120 b a"])"));
  EXPECT_NE(e.find("t.json: model.merges[1]: "), std::string::npos) << e;
  e = error_of(kTiny, std::string("</s>"));
  EXPECT_NE(e.find("the eos_token \"</s>\" is not a token"), std::string::npos) << e;
  e = error_of("{\"model\": ");
  EXPECT_NE(e.find("t.json: not valid JSON"), std::string::npos) << e;
}

// The Unicode normalizers' building blocks on cases from the Unicode Standard's own tables
// (UnicodeData.txt decompositions, SpecialCasing.txt), not from this code.
TEST(UnicodeText, NormalFormsCaseAndMarks) {
  EXPECT_EQ(unicode_normalize("e\u0301", NormalForm::kNFC), "\u00e9");
  EXPECT_EQ(unicode_normalize("\u00e9", NormalForm::kNFD), "e\u0301");
  EXPECT_EQ(unicode_normalize("\ufb01\u2460\uff21", NormalForm::kNFKC), "fi1A");      // ﬁ ① Ａ
  EXPECT_EQ(unicode_normalize("\u1112\u1161\u11ab", NormalForm::kNFC), "\ud55c");   // conjoining jamo -> 한
  EXPECT_EQ(unicode_normalize("\u212b", NormalForm::kNFKD), "A\u030a");                // Ångström sign
  EXPECT_EQ(unicode_normalize("plain ascii", NormalForm::kNFC), "plain ascii");
  // Full mappings, each code point alone: İ has two code points; a word-final Σ stays σ.
  EXPECT_EQ(unicode_lowercase("\u0130stanbul"), "i\u0307stanbul");
  EXPECT_EQ(unicode_lowercase("\u03a3\u0391\u03a3"), "\u03c3\u03b1\u03c3");
  EXPECT_EQ(unicode_lowercase("\u1e9e ABC \u01c5"), "\u00df abc \u01c6");            // ẞ, ǅ
  // Marks of every kind go: Mn (U+0301), Mc (U+093F), Me (U+20DD).
  EXPECT_EQ(strip_combining_marks("e\u0301 \u0939\u093f 1\u20dd"), "e \u0939 1");
}

}  // namespace
}  // namespace zt
