// Token shards (llm.c format), their validation, the deterministic distributed sampler, and the
// corpora and prompts files the tools read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/prompts.h"
#include "data/sampler.h"
#include "data/text_documents.h"
#include "data/token_shard.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("zt_data_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) { return (dir / name).string(); }
  std::string error_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir;
};

TEST_F(DataTest, RoundTripAcrossShards) {
  std::vector<uint16_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8};
  write_token_shard(path("train_000000.bin"), a.data(), a.size());
  write_token_shard(path("train_000001.bin"), b.data(), b.size());
  EXPECT_EQ(fs::file_size(path("train_000000.bin")), 1024u + 10u);
  TokenDataset data(path("train_*.bin"), 256);
  EXPECT_EQ(data.size(), 8u);
  EXPECT_EQ(data.num_shards(), 2u);
  std::vector<int32_t> out(5);
  data.read(3, 5, out.data());  // crosses the shard boundary
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 6, 7, 8}));
}

// Version 2 (llm.c's Llama 3 shards) holds uint32 ids; a dataset may mix both widths.
TEST_F(DataTest, Uint32ShardsHoldIdsPast65535) {
  std::vector<uint32_t> wide = {7, 65535, 65536, 151642};
  std::vector<uint16_t> narrow = {9, 65535};
  write_token_shard(path("train_000000.bin"), wide.data(), wide.size());
  write_token_shard(path("train_000001.bin"), narrow.data(), narrow.size());
  EXPECT_EQ(fs::file_size(path("train_000000.bin")), 1024u + 16u);
  {
    std::ifstream in(path("train_000000.bin"), std::ios::binary);
    int32_t header[3];
    in.read(reinterpret_cast<char*>(header), sizeof(header));
    EXPECT_EQ(header[1], 2);  // the version a uint32 shard carries, as llm.c writes it
  }
  TokenShard shard(path("train_000000.bin"));
  EXPECT_EQ(shard.token_bytes(), 4u);
  EXPECT_EQ(shard.token(3), 151642u);
  TokenDataset data(path("train_*.bin"), 151643);
  std::vector<int32_t> out(6);
  data.read(0, 6, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 65535, 65536, 151642, 9, 65535}));

  std::string e = error_of([&] { TokenDataset(path("train_*.bin"), 151642); });
  EXPECT_NE(e.find("train_000000.bin: token 151642 at position 3 is >= vocab_size 151642"), std::string::npos) << e;
  fs::resize_file(path("train_000000.bin"), 1024 + 8);  // 2 tokens' worth of uint32, header says 4
  e = error_of([&] { TokenShard s(path("train_000000.bin")); });
  EXPECT_NE(e.find("promises 4 tokens of 4 bytes"), std::string::npos) << e;

  EXPECT_EQ(token_bytes_for_vocab(50257), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
}

TEST_F(DataTest, UnknownShardVersionIsRefused) {
  std::vector<uint16_t> tokens = {1, 2};
  write_token_shard(path("v3.bin"), tokens.data(), tokens.size());
  {
    std::fstream f(path("v3.bin"), std::ios::binary | std::ios::in | std::ios::out);
    const int32_t version = 3;
    f.seekp(4);
    f.write(reinterpret_cast<const char*>(&version), sizeof(version));
  }
  std::string e = error_of([&] { TokenShard s(path("v3.bin")); });
  EXPECT_NE(e.find("v3.bin: unsupported shard version 3"), std::string::npos) << e;
}

TEST_F(DataTest, JsonlHoldsOneDocumentPerLine) {
  std::ofstream(path("c.jsonl"), std::ios::binary)
      << "{\"text\": \"caf\\u00e9\\n\", \"id\": 1}\n"  // JSON escapes decode to UTF-8
      << "  \r\n"                                       // a blank line (CRLF) is skipped
      << "{\"id\": 2, \"body\": \"x\", \"text\": \"\"}\r\n"  // an empty document is a document
      << "{\"text\": \"last, no newline\"}";
  std::vector<std::string> docs;
  auto collect = [&](std::string_view d) { docs.emplace_back(d); };
  ASSERT_EQ(input_format_of(path("c.jsonl"), "auto"), InputFormat::kJsonl);
  for_each_document(path("c.jsonl"), InputFormat::kJsonl, "text", collect);
  EXPECT_EQ(docs, (std::vector<std::string>{"caf\xc3\xa9\n", "", "last, no newline"}));

  docs.clear();  // as text, the file is one document, byte for byte
  ASSERT_EQ(input_format_of(path("c.txt"), "auto"), InputFormat::kText);
  for_each_document(path("c.jsonl"), InputFormat::kText, "text", collect);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].substr(0, 9), "{\"text\": ");

  std::string e = error_of([&] { for_each_document(path("c.jsonl"), InputFormat::kJsonl, "body", collect); });
  EXPECT_NE(e.find("c.jsonl:1: no \"body\" field"), std::string::npos) << e;
  std::ofstream(path("bad.jsonl")) << "{\"text\": \"a\"}\n[\"text\"]\n";
  e = error_of([&] { for_each_document(path("bad.jsonl"), InputFormat::kJsonl, "text", collect); });
  EXPECT_NE(e.find("bad.jsonl:2: a JSONL line must be a JSON object"), std::string::npos) << e;
  std::ofstream(path("num.jsonl")) << "\n\n{\"text\": 5}\n";
  e = error_of([&] { for_each_document(path("num.jsonl"), InputFormat::kJsonl, "text", collect); });
  EXPECT_NE(e.find("num.jsonl:3: \"text\" is not a string"), std::string::npos) << e;
  std::ofstream(path("comma.jsonl")) << "{\"text\": \"a\",}\n";  // strict JSON, unlike configs
  e = error_of([&] { for_each_document(path("comma.jsonl"), InputFormat::kJsonl, "text", collect); });
  EXPECT_NE(e.find("comma.jsonl:1: not a JSON line"), std::string::npos) << e;
  e = error_of([&] { input_format_of(path("c.jsonl"), "parquet"); });
  EXPECT_NE(e.find("--input_format must be auto, text or jsonl"), std::string::npos) << e;
}

// zero_generate --prompts: text lines or JSONL records, blank lines skipped, each prompt
// numbered in file order and knowing its line; a bad record names FILE:LINE.
TEST_F(DataTest, PromptsFileHoldsOnePromptPerLine) {
  std::ofstream(path("p.jsonl"), std::ios::binary) << "{\"text\": \"caf\\u00e9\"}\n"
                                                   << " \t\r\n"
                                                   << "{\"input_ids\": [0, 2147483647, 7]}\r\n"
                                                   << "{\"text\": \"last\", \"id\": 3}";
  std::vector<Prompt> p = read_prompts(path("p.jsonl"), InputFormat::kJsonl);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].text, "caf\xc3\xa9");
  EXPECT_TRUE(p[0].input_ids.empty());
  EXPECT_EQ(p[1].input_ids, (std::vector<int32_t>{0, 2147483647, 7}));
  EXPECT_EQ(p[2].text, "last");
  EXPECT_EQ((std::vector<size_t>{p[0].index, p[1].index, p[2].index}), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ((std::vector<size_t>{p[0].line, p[1].line, p[2].line}), (std::vector<size_t>{1, 3, 4}));

  std::ofstream(path("p.txt"), std::ios::binary) << "\n  one prompt, spaces kept \r\n\ntwo";
  p = read_prompts(path("p.txt"), InputFormat::kText);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].text, "  one prompt, spaces kept ");
  EXPECT_EQ(p[1].text, "two");
  EXPECT_EQ(p[1].line, 4u);

  auto error_in = [&](const std::string& line) {
    std::ofstream(path("bad.jsonl"), std::ios::binary) << "{\"text\": \"fine\"}\n\n" << line << "\n";
    return error_of([&] { read_prompts(path("bad.jsonl"), InputFormat::kJsonl); });
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"text\": 5}", "bad.jsonl:3: \"text\" is not a string"},
      {"{\"text\": \"\"}", "bad.jsonl:3: \"text\" is empty"},
      {"{\"text\": \"a\", \"input_ids\": [1]}", "bad.jsonl:3: give the prompt as \"text\" or as \"input_ids\""},
      {"{\"prompt\": \"a\"}", "bad.jsonl:3: give the prompt as \"text\" or as \"input_ids\""},
      {"{\"input_ids\": []}", "bad.jsonl:3: \"input_ids\" must be a non-empty array"},
      {"{\"input_ids\": \"1 2\"}", "bad.jsonl:3: \"input_ids\" must be a non-empty array"},
      {"{\"input_ids\": [1, 5.0]}", "bad.jsonl:3: \"input_ids\" holds 5E0, not an integer"},
      {"{\"input_ids\": [1, -2]}", "bad.jsonl:3: \"input_ids\" holds -2, not a token id"},
      {"{\"input_ids\": [2147483648]}", "bad.jsonl:3: \"input_ids\" holds 2147483648, not a token id"},
      {"{\"input_ids\": [18446744073709551615]}", "holds 18446744073709551615, not a token id"},
      {"[1, 2]", "bad.jsonl:3: a JSONL line must be a JSON object"},
      {"{\"text\": \"a\",}", "bad.jsonl:3: not a JSON line"},
  };
  for (const auto& [line, expected] : bad) {
    const std::string e = error_in(line);
    EXPECT_NE(e.find(expected), std::string::npos) << line << " gave: " << e;
  }
  std::ofstream(path("blank.txt")) << "\n \n\t\n";
  const std::string e = error_of([&] { read_prompts(path("blank.txt"), InputFormat::kText); });
  EXPECT_NE(e.find("blank.txt: no prompts"), std::string::npos) << e;
}

TEST_F(DataTest, BadShardsAreClearErrors) {
  std::vector<uint16_t> tokens = {1, 2, 300};
  write_token_shard(path("big.bin"), tokens.data(), tokens.size());
  std::string e = error_of([&] { TokenDataset(path("big.bin"), 256); });
  EXPECT_NE(e.find("big.bin: token 300 at position 2 is >= vocab_size 256"), std::string::npos) << e;

  fs::resize_file(path("big.bin"), 1024 + 4);  // truncated
  e = error_of([&] { TokenShard s(path("big.bin")); });
  EXPECT_NE(e.find("truncated or corrupt"), std::string::npos) << e;

  std::ofstream(path("short.bin")) << "tiny";
  e = error_of([&] { TokenShard s(path("short.bin")); });
  EXPECT_NE(e.find("short.bin: not a token shard"), std::string::npos) << e;

  std::vector<char> junk(2048, 7);
  std::ofstream(path("junk.bin"), std::ios::binary).write(junk.data(), junk.size());
  e = error_of([&] { TokenShard s(path("junk.bin")); });
  EXPECT_NE(e.find("bad magic"), std::string::npos) << e;

  e = error_of([&] { TokenDataset(path("none_*.bin"), 256); });
  EXPECT_NE(e.find("no file matches"), std::string::npos) << e;
}

TEST(Feistel, IsAPermutation) {
  for (uint64_t n : {1ull, 2ull, 7ull, 1000ull, 4097ull}) {
    FeistelPermutation p(n, 42);
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(p(i));
    EXPECT_EQ(seen.size(), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  FeistelPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 20);  // different seeds, different orders
}

TEST_F(DataTest, SamplerIsAFunctionOfSeedAndSampleOnly) {
  std::vector<uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  for (auto& t : tokens) t %= 256;
  write_token_shard(path("d.bin"), tokens.data(), tokens.size());
  TokenDataset data(path("d.bin"), 256);
  DistributedSampler s1(data, 10, 7), s2(data, 10, 7), other(data, 10, 8);
  EXPECT_EQ(s1.num_windows(), 99u);
  // One epoch visits every window once.
  std::set<uint64_t> epoch;
  for (uint64_t g = 0; g < 99; ++g) epoch.insert(s1.window_of(g));
  EXPECT_EQ(epoch.size(), 99u);
  // A global batch of 8 split as 1 rank x 8, or 2 ranks x 4, or 4 micro-steps x 2: same samples.
  std::vector<int32_t> whole_in(80), whole_tg(80), part_in(80), part_tg(80);
  s1.fill(16, 8, whole_in.data(), whole_tg.data());
  for (int r = 0; r < 4; ++r) s2.fill(16 + r * 2, 2, part_in.data() + r * 20, part_tg.data() + r * 20);
  EXPECT_EQ(whole_in, part_in);
  EXPECT_EQ(whole_tg, part_tg);
  // Targets are the inputs shifted by one, from the window [jT, jT + T].
  uint64_t w = s1.window_of(16);
  EXPECT_EQ(whole_in[0], int32_t((w * 10) % 256));
  EXPECT_EQ(whole_tg[0], int32_t((w * 10 + 1) % 256));
  EXPECT_NE(s1.window_of(0) * 1000 + s1.window_of(1), other.window_of(0) * 1000 + other.window_of(1));
}

TEST_F(DataTest, EvalWindowsFollowTheFixedDefinition) {
  std::vector<uint16_t> tokens(101);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_token_shard(path("v.bin"), tokens.data(), tokens.size());
  TokenDataset data(path("v.bin"), 256);
  EvalWindows all(data, 10, 0), few(data, 10, 3);
  EXPECT_EQ(all.count(), 10);
  EXPECT_EQ(few.count(), 3);
  std::vector<int32_t> in(20), tg(20);
  all.fill(4, 2, in.data(), tg.data());
  EXPECT_EQ(in[0], 40);
  EXPECT_EQ(tg[9], 50);
  EXPECT_EQ(in[10], 50);
  std::string e = error_of([&] { EvalWindows(data, 200, 0); });
  EXPECT_NE(e.find("fewer than one eval window"), std::string::npos) << e;
}

TEST(ByteTokenizer, MapsBytes) {
  auto t = byte_tokenize(std::string("A\xff\n", 3));
  EXPECT_EQ(t, (std::vector<uint16_t>{65, 255, 10}));
}

}  // namespace
}  // namespace zt
