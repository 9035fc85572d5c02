#include "config/json_reader.h"

#include <cstdint>

#include "core/error.h"
#include "core/regular_file.h"

namespace zt {

std::string read_text_file(const std::string& path) { return read_regular_file(path, UINT64_MAX, "text file"); }

std::string read_json_text(const std::string& path) { return read_regular_file(path, kMaxJsonBytes, "JSON file"); }

boost::json::value parse_json_lenient(std::string_view text, const std::string& source) {
  boost::json::parse_options options;
  options.allow_comments = true;
  options.allow_trailing_commas = true;
  boost::json::stream_parser parser({}, options);
  boost::system::error_code ec;
  size_t consumed = parser.write_some(text.data(), text.size(), ec);
  if (!ec) parser.finish(ec);
  if (ec) {
    // The parser stops at the offending byte; turn its offset into line:column for the user.
    size_t line = 1, column = 1;
    for (size_t i = 0; i < consumed && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw UsageError(cat(source, ":", line, ":", column, ": malformed JSON: ", ec.message()));
  }
  return parser.release();
}

boost::json::value read_json_file(const std::string& path) {
  return parse_json_lenient(read_json_text(path), path);
}

}  // namespace zt
