// Fuzz harness: an llm.c token shard (TokenShard and TokenDataset, data/token_shard.h), written to
// a scratch file and opened as a training run opens its data. The header is 256 int32 of which
// the reader looks at three, so the input is the shard with its header cut short: its first 12
// bytes are the magic, version and token count, zero-padded to the 1024-byte header; the rest are
// the tokens. Mutations then land on what the reader checks. An input shorter than 12 bytes is
// written as it is: a file shorter than any header. Built twice from this file: with
// fuzz_driver.cpp as a ctest test (seeded mutations of corpus/token_shard/), and with ZT_FUZZ=ON
// as a libFuzzer target.
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "fuzz_check.h"
#include "fuzz_temp_file.h"

namespace {

constexpr size_t kHeaderHead = 12;  // magic, version, count
constexpr int kVocabSize = 50257;   // GPT-2's: uint16 shards hold ids past it, uint32 ones far past

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The id scans are OpenMP loops: one thread runs the same code, where a team per input cost
  // ~10 ms of waiting for time slices on a busy 2-core machine (17 s a ctest run instead of 0.4).
  static const bool one_thread = (omp_set_num_threads(1), true);
  (void)one_thread;
  std::string file(reinterpret_cast<const char*>(data), size);
  if (size >= kHeaderHead) file.insert(kHeaderHead, zt::kShardHeaderBytes - kHeaderHead, '\0');
  static zt::fuzz::TempFile temp("shard.bin");
  const std::string& path = temp.write(file);
  zt::fuzz::check_reader(path, [&] {
    {
      const zt::TokenShard shard(path);
      // An accepted shard is exactly its header and its tokens, every one readable.
      if (shard.token_bytes() != 2 && shard.token_bytes() != 4) {
        zt::fuzz::finding("a token width accepted that is neither 2 nor 4");
      }
      if (zt::kShardHeaderBytes + shard.size() * shard.token_bytes() != file.size()) {
        zt::fuzz::finding("a shard accepted whose tokens do not fill the file");
      }
      std::vector<int32_t> tokens(shard.size());
      shard.read(0, tokens.size(), tokens.data());
      size_t first = SIZE_MAX;
      for (size_t i = 0; i < tokens.size() && first == SIZE_MAX; ++i) {
        if (uint32_t(tokens[i]) != shard.token(i)) zt::fuzz::finding("read() and token() disagree");
        if (int64_t(shard.token(i)) >= kVocabSize) first = i;
      }
      if (shard.first_token_at_or_above(kVocabSize) != first) zt::fuzz::finding("first_token_at_or_above is wrong");
    }
    // The dataset over it (its path is a glob matching itself) refuses an id past the vocabulary
    // by name; every id it accepts is below it.
    const zt::TokenDataset dataset(path, kVocabSize);
    std::vector<int32_t> tokens(dataset.size());
    dataset.read(0, tokens.size(), tokens.data());
    for (int32_t t : tokens) {
      if (t < 0 || t >= kVocabSize) zt::fuzz::finding("a dataset accepted with an id past the vocabulary");
    }
  });
  return 0;
}
