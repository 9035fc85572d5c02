// Reads JSON the way DeepSpeed's own config reader does: comments and trailing commas are
// accepted. A malformed file is a UsageError that names the file, the line and the column.
#pragma once

#include <boost/json.hpp>
#include <string>
#include <string_view>

namespace zt {

/// Parses `text` leniently; `source` (a file name) prefixes error messages.
boost::json::value parse_json_lenient(std::string_view text, const std::string& source);

/// Reads and parses a file (read_json_text); a missing or unreadable file is a UsageError naming it.
boost::json::value read_json_file(const std::string& path);

/// The text of a JSON file: a regular file of at most kMaxJsonBytes (core/regular_file.h);
/// anything else is a UsageError naming it.
std::string read_json_text(const std::string& path);

/// Reads a whole regular file of any size into a string; a missing, unreadable or special file
/// is a UsageError naming it.
std::string read_text_file(const std::string& path);

}  // namespace zt
