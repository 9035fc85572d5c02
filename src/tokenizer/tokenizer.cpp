#include "tokenizer/tokenizer.h"

#include <boost/json.hpp>
#include <filesystem>

#include "config/json_reader.h"
#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

namespace zt {

namespace {

// tokenizer_config.json's eos_token: a string, or an AddedToken object with "content".
std::optional<std::string> config_eos_token(const std::string& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  const boost::json::value config = read_json_file(path);
  if (!config.is_object()) throw UsageError(cat(path, ": expected a JSON object"));
  const boost::json::value* eos = config.get_object().if_contains("eos_token");
  if (!eos || eos->is_null()) return std::nullopt;
  if (eos->is_string()) return std::string(eos->get_string());
  if (eos->is_object() && eos->get_object().contains("content") && eos->get_object().at("content").is_string()) {
    return std::string(eos->get_object().at("content").get_string());
  }
  throw UsageError(cat(path, ": eos_token: expected a string or an object with \"content\""));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const std::string file = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  if (is_dir && !fs::exists(file, ec)) {
    throw UsageError(cat(path, ": no tokenizer.json (the fast-tokenizer file HF writes next to the model; a "
                               "tokenizer.model alone, SentencePiece's, is not read)"));
  }
  const std::string config = (fs::path(file).parent_path() / "tokenizer_config.json").string();
  // tokenizer.json files run to tens of MB (Qwen2's is 7 MB, some 30 MB): read_text_file, not
  // the JSON-config size cap.
  return std::make_unique<HfTokenizer>(read_text_file(file), file, config_eos_token(config));
}

}  // namespace zt
