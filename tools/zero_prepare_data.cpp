// zero_prepare_data INPUT... --output_dir DIR [--input_format auto|text|jsonl] [--text_field F]
//                   [--val_fraction F] [--shard_size N] [--overwrite]
//
// Byte-level tokenization (vocab 256) of text and JSONL files into llm.c-format shards:
// DIR/train_000000.bin ... and DIR/val_000000.bin .... The documents (a text file, or a JSONL
// line's text field) are concatenated in the order given; the last `val_fraction` of the tokens
// becomes the validation split.
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "config/tool_options.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tool_main.h"
#include "data/byte_tokenizer.h"
#include "data/text_documents.h"
#include "data/token_shard.h"

namespace po = boost::program_options;

namespace {

std::string shard_name(const std::string& dir, const char* split, size_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "/%s_%06zu.bin", split, index);
  return dir + name;
}

int run(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string output_dir, input_format = "auto", text_field = "text";
  double val_fraction = 0.1;
  int64_t shard_size = 100'000'000;
  bool overwrite = false;
  po::options_description opts("zero_prepare_data INPUT... --output_dir DIR");
  opts.add_options()
    ("help,h", "print this help")
    ("output_dir", po::value(&output_dir), "where train_NNNNNN.bin and val_NNNNNN.bin go")
    ("input_format", po::value(&input_format),
     "auto (*.jsonl and *.json are JSONL, the rest text), text or jsonl (default auto)")
    ("text_field", po::value(&text_field), "the field of each JSONL line that holds its document (default text)")
    ("val_fraction", po::value(&val_fraction), "fraction of tokens (from the end) for validation (default 0.1)")
    ("shard_size", po::value(&shard_size), "tokens per shard (default 100M)")
    ("overwrite", po::bool_switch(&overwrite), "replace existing shards in output_dir");
  po::options_description hidden;
  hidden.add_options()("input", po::value(&inputs));
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm, hidden, positional)) return 0;
  ZT_USAGE_CHECK(!inputs.empty(), "no INPUT text file given");
  ZT_USAGE_CHECK(!output_dir.empty(), "--output_dir is required");
  ZT_USAGE_CHECK(val_fraction >= 0 && val_fraction < 1, "--val_fraction must be in [0, 1), got ", val_fraction);
  ZT_USAGE_CHECK(shard_size >= 1 && shard_size <= INT32_MAX, "--shard_size must be in [1, 2^31-1]");

  std::string text;
  for (const auto& input : inputs) {
    zt::for_each_document(input, zt::input_format_of(input, input_format), text_field,
                          [&](std::string_view document) { text += document; });
  }
  ZT_USAGE_CHECK(!text.empty(), "the inputs are empty");
  const std::vector<uint16_t> tokens = zt::byte_tokenize(text);
  const size_t val_tokens = size_t(std::llround(double(tokens.size()) * val_fraction));
  const size_t train_tokens = tokens.size() - val_tokens;

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  ZT_USAGE_CHECK(!ec, output_dir, ": cannot create: ", ec.message());
  // Never overwrite silently: refuse when any shard we would write already exists.
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> plan;  // path, [begin, end)
  auto plan_split = [&](const char* split, size_t begin, size_t end) {
    for (size_t start = begin, index = 0; start < end; start += size_t(shard_size), ++index) {
      plan.push_back({shard_name(output_dir, split, index), {start, std::min(end, start + size_t(shard_size))}});
    }
  };
  plan_split("train", 0, train_tokens);
  plan_split("val", train_tokens, tokens.size());
  for (const auto& [path, range] : plan) {
    ZT_USAGE_CHECK(overwrite || !fs::exists(path), path, ": already exists; pass --overwrite to replace it");
  }
  for (const auto& [path, range] : plan) {
    zt::write_token_shard(path, tokens.data() + range.first, range.second - range.first);
  }
  zt::log_info("wrote ", train_tokens, " train and ", val_tokens, " val tokens (byte-level, vocab 256) in ",
               plan.size(), " shard(s) to ", output_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zero_prepare_data", [&] { return run(argc, argv); });
}
