// zero_tokenize --tokenizer DIR [--no_special_tokens] [--decode [--skip_special_tokens]] FILE
// zero_tokenize --tokenizer DIR --info
//
// Runs a tokenizer over FILE line by line (the '\n' is not part of a line), the way
// zero_prepare_data tokenizes documents. Encoding prints each line's ids, space-separated;
// --decode reads lines of ids and prints each decoded text as a JSON string, so that any text
// (newlines, U+FFFD) is one unambiguous output line. --info prints the vocabulary size and the EOS
// id as JSON. Use it to check a tokenizer against HF's.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <charconv>
#include <iostream>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "config/tool_options.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace {

std::vector<uint32_t> parse_ids(std::string_view line, const std::string& where) {
  std::vector<uint32_t> ids;
  const char* p = line.data();
  const char* end = p + line.size();
  while (p < end) {
    if (*p == ' ') {
      ++p;
      continue;
    }
    uint32_t id = 0;
    auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc() || (next < end && *next != ' ')) throw zt::UsageError(where + ": expected token ids");
    ids.push_back(id);
    p = next;
  }
  return ids;
}

int run(int argc, char** argv) {
  std::string tokenizer_path, input;
  bool no_special = false, decode = false, skip_special = false, info = false;
  po::options_description opts("zero_tokenize --tokenizer DIR FILE");
  opts.add_options()
    ("help,h", "print this help")
    ("tokenizer", po::value(&tokenizer_path), "an HF model or tokenizer folder, or a tokenizer.json")
    ("no_special_tokens", po::bool_switch(&no_special), "encode without the post-processor's special tokens")
    ("decode", po::bool_switch(&decode), "FILE holds ids, one sequence per line: print their text")
    ("skip_special_tokens", po::bool_switch(&skip_special), "with --decode: leave special tokens out")
    ("info", po::bool_switch(&info), "print {\"vocab_size\": N, \"eos_token_id\": ID or null} and exit");
  po::options_description hidden;
  hidden.add_options()("input", po::value(&input));
  po::positional_options_description positional;
  positional.add("input", 1);
  po::variables_map vm;
  if (!zt::parse_tool_command_line(argc, argv, opts, vm, hidden, positional)) return 0;
  ZT_USAGE_CHECK(!tokenizer_path.empty(), "--tokenizer is required");
  ZT_USAGE_CHECK(info || !input.empty(), "no input FILE given");

  const auto tokenizer = zt::load_tokenizer(tokenizer_path);
  if (info) {
    boost::json::object o;
    o["vocab_size"] = tokenizer->vocab_size();
    const auto eos = tokenizer->eos_token_id();
    o["eos_token_id"] = eos ? boost::json::value(*eos) : boost::json::value(nullptr);
    std::cout << boost::json::serialize(o) << std::endl;
    return 0;
  }
  const std::string text = zt::read_text_file(input);
  std::string out;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    ++line_no;
    if (decode) {
      const auto ids = parse_ids(line, zt::cat(input, ":", line_no));
      for (uint32_t id : ids) {
        ZT_USAGE_CHECK(id < tokenizer->vocab_size(), input, ":", line_no, ": id ", id, " is >= the vocabulary size ",
                       tokenizer->vocab_size());
      }
      out += boost::json::serialize(boost::json::string(tokenizer->decode(ids, skip_special)));
    } else {
      const auto ids = tokenizer->encode(line, !no_special);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
      }
    }
    out += '\n';
    begin = end + 1;
  }
  std::cout << out << std::flush;
  ZT_CHECK(std::cout.good(), "writing the output failed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zero_tokenize", [&] { return run(argc, argv); });
}
