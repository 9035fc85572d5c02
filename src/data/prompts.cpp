#include "data/prompts.h"

#include <boost/json.hpp>
#include <limits>

#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

namespace {

Prompt jsonl_prompt(std::string_view line, const std::string& where) {
  boost::system::error_code ec;
  boost::json::parse_options strict;  // JSON Lines is strict JSON: no comments, no trailing commas
  const boost::json::value parsed = boost::json::parse(line, ec, {}, strict);
  if (ec) throw UsageError(cat(where, ": not a JSON line: ", ec.message()));
  if (!parsed.is_object()) throw UsageError(cat(where, ": a JSONL line must be a JSON object"));
  const boost::json::value* text = parsed.get_object().if_contains("text");
  const boost::json::value* ids = parsed.get_object().if_contains("input_ids");
  if (!text == !ids) throw UsageError(cat(where, ": give the prompt as \"text\" or as \"input_ids\", one of them"));
  Prompt p;
  if (text) {
    if (!text->is_string()) throw UsageError(cat(where, ": \"text\" is not a string"));
    p.text = std::string(text->get_string());
    if (p.text.empty()) throw UsageError(cat(where, ": \"text\" is empty"));
    return p;
  }
  if (!ids->is_array() || ids->get_array().empty()) {
    throw UsageError(cat(where, ": \"input_ids\" must be a non-empty array of token ids"));
  }
  for (const boost::json::value& id : ids->get_array()) {
    // An id written 5.0 is not one: HF tokenizers write integers.
    if (!id.is_int64() && !id.is_uint64()) {
      throw UsageError(cat(where, ": \"input_ids\" holds ", id, ", not an integer"));
    }
    const bool fits = id.is_int64() ? id.get_int64() >= 0 && id.get_int64() <= std::numeric_limits<int32_t>::max()
                                    : id.get_uint64() <= uint64_t(std::numeric_limits<int32_t>::max());
    if (!fits) throw UsageError(cat(where, ": \"input_ids\" holds ", id, ", not a token id"));
    p.input_ids.push_back(int32_t(id.is_int64() ? id.get_int64() : int64_t(id.get_uint64())));
  }
  return p;
}

}  // namespace

std::vector<Prompt> read_prompts(const std::string& path, InputFormat format) {
  const std::string text = read_regular_file(path, UINT64_MAX, "prompts file");
  std::vector<Prompt> prompts;
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a file written on Windows
    if (line.find_first_not_of(" \t\f\v") == std::string_view::npos) return;
    Prompt p = format == InputFormat::kJsonl ? jsonl_prompt(line, cat(path, ":", line_no)) : Prompt{};
    if (format == InputFormat::kText) p.text = std::string(line);
    p.index = prompts.size();
    p.line = line_no;
    prompts.push_back(std::move(p));
  });
  ZT_USAGE_CHECK(!prompts.empty(), path, ": no prompts (every line is blank)");
  return prompts;
}

}  // namespace zt
