// The documents of a text corpus, as zero_prepare_data reads them: a plain text file is one
// document; a JSONL file (one JSON object per line, as HF datasets' to_json writes it) holds one
// document per line, the string under --text_field. A line that is not such an object is a
// UsageError naming the file and the line, so one bad record in a million is found at once.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace zt {

enum class InputFormat { kText, kJsonl };

/// `flag` is "text", "jsonl" or "auto": by the file's name, *.jsonl and *.json are JSONL and
/// anything else is text. Another flag is a UsageError.
InputFormat input_format_of(const std::string& path, const std::string& flag);

/// Calls `line(number, text)` for each line of `text` (1-based numbers, without the '\n'; a last
/// line without one counts too).
void for_each_line(std::string_view text, const std::function<void(size_t, std::string_view)>& line);

/// Calls `document` for each document of the file, in order. In JSONL, lines holding only
/// whitespace are skipped; every other line must be an object whose `text_field` is a string.
void for_each_document(const std::string& path, InputFormat format, const std::string& text_field,
                       const std::function<void(std::string_view)>& document);

}  // namespace zt
