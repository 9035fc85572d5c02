#include "data/text_documents.h"

#include <boost/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

// The document of JSONL line `line_no` (1-based); `where` is "FILE:LINE" for errors.
std::string_view jsonl_text(boost::json::value& parsed, std::string_view line, const std::string& text_field,
                            const std::string& where) {
  boost::system::error_code ec;
  boost::json::parse_options strict;  // JSON Lines is strict JSON: no comments, no trailing commas
  parsed = boost::json::parse(line, ec, {}, strict);
  if (ec) throw UsageError(cat(where, ": not a JSON line: ", ec.message()));
  if (!parsed.is_object()) throw UsageError(cat(where, ": a JSONL line must be a JSON object"));
  const boost::json::value* field = parsed.get_object().if_contains(text_field);
  if (!field) throw UsageError(cat(where, ": no \"", text_field, "\" field (choose another with --text_field)"));
  if (!field->is_string()) throw UsageError(cat(where, ": \"", text_field, "\" is not a string"));
  return field->get_string();
}

}  // namespace

InputFormat input_format_of(const std::string& path, const std::string& flag) {
  if (flag == "text") return InputFormat::kText;
  if (flag == "jsonl") return InputFormat::kJsonl;
  ZT_USAGE_CHECK(flag == "auto", "--input_format must be auto, text or jsonl, got \"", flag, "\"");
  return ends_with(path, ".jsonl") || ends_with(path, ".json") ? InputFormat::kJsonl : InputFormat::kText;
}

void for_each_document(const std::string& path, InputFormat format, const std::string& text_field,
                       const std::function<void(std::string_view)>& document) {
  const std::string text = read_regular_file(path, UINT64_MAX, "text file");
  if (format == InputFormat::kText) {
    document(text);
    return;
  }
  boost::json::value parsed;
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (!is_blank(line)) document(jsonl_text(parsed, line, text_field, cat(path, ":", line_no)));
  });
}

void for_each_line(std::string_view text, const std::function<void(size_t, std::string_view)>& line) {
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    line(++line_no, text.substr(begin, end - begin));
    begin = end + 1;
  }
}

}  // namespace zt
