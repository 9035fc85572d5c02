#include "config/json_reader.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zt {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_USAGE_CHECK(in.good(), path, ": cannot open file: ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ZT_USAGE_CHECK(!in.bad(), path, ": read error");
  return buffer.str();
}

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
  return parse_json_lenient(read_text_file(path), path);
}

}  // namespace zt
