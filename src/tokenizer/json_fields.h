// Typed reads from tokenizer.json, each error one line naming the file and the component's path
// (e.g. "tok/tokenizer.json: pre_tokenizer.pretokenizers[1].behavior: ...").
#pragma once

#include <boost/json.hpp>
#include <string>
#include <string_view>

#include "config/json_section.h"
#include "core/error.h"

namespace zt {

struct JsonWhere {
  std::string file;  ///< the tokenizer.json path
  std::string path;  ///< the component, e.g. "model" or "normalizer.normalizers[0]"

  JsonWhere at(std::string_view key) const { return {file, path.empty() ? std::string(key) : cat(path, ".", key)}; }
  JsonWhere index(size_t i) const { return {file, cat(path, "[", i, "]")}; }
  /// Throws "<file>: <path>: <what>" on one line: tokens from the file (a vocabulary entry holding
  /// a newline) appear in both the path and `what`.
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(one_line(cat(file, ": ", path, ": ", what)));
  }
};

/// obj[key], or null when absent (a reference, never a copy: the callers keep references into it).
const boost::json::value& json_member(const boost::json::object& obj, std::string_view key);
const boost::json::object& json_object(const boost::json::value& v, const JsonWhere& where);
const boost::json::array& json_array(const boost::json::value& v, const JsonWhere& where);
/// obj[key] as a string; absent or another type fails unless `fallback` is given.
std::string json_string(const boost::json::object& obj, std::string_view key, const JsonWhere& where,
                        const char* fallback = nullptr);
/// obj[key] as a string of exactly one character: HF's `char` fields (Strip's content,
/// Metaspace's replacement), which the steps reading them advance by; an empty one would never
/// move them on.
std::string json_char(const boost::json::object& obj, std::string_view key, const JsonWhere& where,
                      const char* fallback = nullptr);
/// obj[key] as a bool; absent or null gives `fallback`.
bool json_bool(const boost::json::object& obj, std::string_view key, const JsonWhere& where, bool fallback);
/// obj[key] as a non-negative integer below 2^32.
uint32_t json_id(const boost::json::value& v, const JsonWhere& where);
/// The component's "type".
std::string json_type(const boost::json::object& obj, const JsonWhere& where);
/// `type` is not implemented: "<path>: <what> \"type\" is not supported (supported: ...)".
[[noreturn]] void unsupported(const JsonWhere& where, const std::string& what, const std::string& type,
                              const char* supported);

}  // namespace zt
