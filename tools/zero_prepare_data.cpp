// zero_prepare_data INPUT... --output_dir DIR [--tokenizer DIR [--eos_token T]]
//                   [--input_format auto|text|jsonl] [--text_field F]
//                   [--val_fraction F] [--shard_size N] [--overwrite] [--disable_tqdm]
//
// Tokenizes text and JSONL files into llm.c-format shards: DIR/train_000000.bin ... and
// DIR/val_000000.bin .... The documents (a text file, or a JSONL line's text field) are
// concatenated in the order given; the last `val_fraction` of the tokens becomes the validation
// split. With --tokenizer, each document is encoded as HF's encode does (a BOS where the
// tokenizer's post-processor adds one) and followed by the EOS token, on every core; the shards
// hold uint32 ids when the vocabulary passes 65,536. Without it, tokens are bytes (vocab 256).
#include <omp.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "config/tool_options.h"
#include "core/error.h"
#include "core/human_units.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "core/tool_main.h"
#include "data/byte_tokenizer.h"
#include "data/text_documents.h"
#include "data/token_shard.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace {

std::string shard_name(const std::string& dir, const char* split, size_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "/%s_%06zu.bin", split, index);
  return dir + name;
}

// Every document's ids followed by `eos`, in document order whatever the thread count: batches
// of documents are encoded in parallel, then appended in order; the progress line counts bytes.
std::vector<uint32_t> encode_documents(const zt::Tokenizer& tokenizer, const std::vector<std::string>& documents,
                                       uint32_t eos, bool progress) {
  size_t total_bytes = 0;
  for (const auto& d : documents) total_bytes += d.size();
  zt::ProgressLine line(int64_t(total_bytes), progress);
  zt::Stopwatch clock;
  std::vector<uint32_t> tokens;
  std::vector<std::vector<uint32_t>> batch_ids;
  size_t done_bytes = 0;
  constexpr size_t kBatchBytes = size_t(8) << 20;
  for (size_t begin = 0; begin < documents.size();) {
    size_t end = begin, bytes = 0;
    while (end < documents.size() && (end == begin || bytes < kBatchBytes)) bytes += documents[end++].size();
    batch_ids.assign(end - begin, {});
    // An exception must not leave an OpenMP region (that is std::terminate): keep the first, rethrow.
    std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = begin; i < end; ++i) {
      try {
        batch_ids[i - begin] = tokenizer.encode(documents[i]);
      } catch (...) {
#pragma omp critical(zt_prepare_failure)
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
    for (auto& ids : batch_ids) {
      tokens.insert(tokens.end(), ids.begin(), ids.end());
      tokens.push_back(eos);
    }
    done_bytes += bytes;
    begin = end;
    const double seconds = std::max(clock.seconds(), 1e-9);
    line.update(int64_t(done_bytes), zt::cat(zt::human_count(double(tokens.size())), " tokens, ",
                                               zt::human_count(double(tokens.size()) / seconds), " tokens/s"));
  }
  // The encoding alone (reading and writing excluded): what tests/bench/bench_tokenize.sh compares.
  const double seconds = std::max(clock.seconds(), 1e-9);
  zt::log_info("encoded ", documents.size(), " documents (", total_bytes, " bytes) into ", tokens.size(),
               " tokens in ", seconds, " s on ", omp_get_max_threads(), " threads: ",
               zt::human_count(double(tokens.size()) / seconds), " tokens/s");
  return tokens;
}

template <typename Token>
void write_shards(const std::vector<Token>& tokens, const std::string& output_dir, double val_fraction,
                  int64_t shard_size, bool overwrite, const std::string& what) {
  namespace fs = std::filesystem;
  const size_t val_tokens = size_t(std::llround(double(tokens.size()) * val_fraction));
  const size_t train_tokens = tokens.size() - val_tokens;
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
  zt::log_info("wrote ", train_tokens, " train and ", val_tokens, " val tokens (", what, ") in ", plan.size(),
               " shard(s) to ", output_dir);
}

int run(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string output_dir, input_format = "auto", text_field = "text", tokenizer_dir, eos_token;
  double val_fraction = 0.1;
  int64_t shard_size = 100'000'000;
  bool overwrite = false, disable_tqdm = false;
  po::options_description opts("zero_prepare_data INPUT... --output_dir DIR");
  opts.add_options()
    ("help,h", "print this help")
    ("output_dir", po::value(&output_dir), "where train_NNNNNN.bin and val_NNNNNN.bin go")
    ("tokenizer", po::value(&tokenizer_dir), "an HF model or tokenizer folder (tokenizer.json); default: bytes")
    ("eos_token", po::value(&eos_token), "the token after each document (default: tokenizer_config.json's eos_token)")
    ("input_format", po::value(&input_format),
     "auto (*.jsonl and *.json are JSONL, the rest text), text or jsonl (default auto)")
    ("text_field", po::value(&text_field), "the field of each JSONL line that holds its document (default text)")
    ("val_fraction", po::value(&val_fraction), "fraction of tokens (from the end) for validation (default 0.1)")
    ("shard_size", po::value(&shard_size), "tokens per shard (default 100M)")
    ("overwrite", po::bool_switch(&overwrite), "replace existing shards in output_dir")
    ("disable_tqdm", po::bool_switch(&disable_tqdm), "no progress line (it is drawn only on a terminal)");
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

  ZT_USAGE_CHECK(eos_token.empty() || !tokenizer_dir.empty(), "--eos_token needs --tokenizer (bytes have no EOS)");

  if (tokenizer_dir.empty()) {
    std::string text;
    for (const auto& input : inputs) {
      zt::for_each_document(input, zt::input_format_of(input, input_format), text_field,
                            [&](std::string_view document) { text += document; });
    }
    ZT_USAGE_CHECK(!text.empty(), "the inputs are empty");
    write_shards(zt::byte_tokenize(text), output_dir, val_fraction, shard_size, overwrite, "byte-level, vocab 256");
    return 0;
  }

  const auto tokenizer = zt::load_tokenizer(tokenizer_dir);
  std::optional<uint32_t> eos = tokenizer->eos_token_id();
  if (!eos_token.empty()) {
    eos = tokenizer->token_to_id(eos_token);
    ZT_USAGE_CHECK(eos.has_value(), "--eos_token \"", eos_token, "\" is not a token of ", tokenizer_dir);
  }
  ZT_USAGE_CHECK(eos.has_value(), tokenizer_dir, ": no eos_token in tokenizer_config.json; name one with --eos_token");
  std::vector<std::string> documents;
  for (const auto& input : inputs) {
    zt::for_each_document(input, zt::input_format_of(input, input_format), text_field,
                          [&](std::string_view document) { documents.emplace_back(document); });
  }
  ZT_USAGE_CHECK(!documents.empty(), "the inputs hold no document");
  const std::vector<uint32_t> tokens = encode_documents(*tokenizer, documents, *eos, !disable_tqdm);
  const std::string what = zt::cat(tokenizer_dir, ", vocab ", tokenizer->vocab_size(), ", ", documents.size(),
                                   " documents");
  if (zt::token_bytes_for_vocab(tokenizer->vocab_size()) == 2) {
    write_shards(std::vector<uint16_t>(tokens.begin(), tokens.end()), output_dir, val_fraction, shard_size, overwrite,
                 what);
  } else {
    write_shards(tokens, output_dir, val_fraction, shard_size, overwrite, what);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zero_prepare_data", [&] { return run(argc, argv); });
}
