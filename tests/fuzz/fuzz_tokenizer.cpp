// Fuzz harness: the HF tokenizer.json reader (HfTokenizer, tokenizer/hf_tokenizer.h) on any bytes,
// and then the tokenizer it built: a fixed text is encoded and decoded back, so that a file the
// reader accepts but the pipeline cannot run (an id past the vocabulary, a step that never ends)
// is found as well. Built twice from this file: with fuzz_driver.cpp as a ctest test (seeded
// mutations of corpus/tokenizer/), and with ZT_FUZZ=ON as a libFuzzer target.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

constexpr const char* kSource = "fuzz/tokenizer.json";

// Words, digits, spaces of every kind, the seeds' special tokens, accents (NFD/StripAccents),
// an uppercase dotted I (a lowercase of two code points), a byte no vocabulary spells and
// ill-formed UTF-8 (replaced before anything runs).
const std::string kText =
    "Hello, World! aab ab  12 345\t\n <s>x</s><|endoftext|><|im_start|> caf\xC3\xA9 "
    "\xC4\xB0stanbul \xE2\x96\x81\xE2\x96\x81z \x01 \xF0\x9F\x98\x80 \xFF\xC3";

void check_ids(const zt::HfTokenizer& tok, const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) {
    if (id >= tok.vocab_size()) {
      zt::fuzz::finding("encode gave id " + std::to_string(id) + ", past vocab_size " +
                        std::to_string(tok.vocab_size()));
    }
  }
}

void check_text(const std::string& text) {
  if (zt::replace_invalid_utf8(text) != text) zt::fuzz::finding("decode gave ill-formed UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  zt::fuzz::check_reader(kSource, [&] {
    const zt::HfTokenizer tok(json, kSource, std::nullopt);
    // Every id the tokenizer produces is below vocab_size (the model's embedding rows are
    // checked against it), and every id below it decodes, with or without special tokens.
    for (bool special : {true, false}) {
      const std::vector<uint32_t> ids = tok.encode(kText, special);
      check_ids(tok, ids);
      check_text(tok.decode(ids));
      check_text(tok.decode(ids, /*skip_special_tokens=*/true));
    }
    for (const char* token : {"<s>", "</s>", "<|endoftext|>", "a", "ab"}) {
      if (const auto id = tok.token_to_id(token); id && *id >= tok.vocab_size()) {
        zt::fuzz::finding(std::string("token_to_id(\"") + token + "\") is past vocab_size");
      }
    }
    // Ids the vocabulary may not have decode to nothing, never to a crash.
    const uint32_t n = tok.vocab_size();
    check_text(tok.decode({0, n > 0 ? n - 1 : 0, n, n + 1, UINT32_MAX}));
  });
  return 0;
}
