// What the config.json tests share: a JSON text with one key changed, and a parse's error line.
#pragma once

#include <boost/json.hpp>
#include <string>

#include "config/model_config.h"
#include "core/error.h"

namespace zt::testing {

/// `text` with `key` set to `value`; a null value with a key written "-name" removes "name".
inline std::string with_key(const std::string& text, const std::string& key, const boost::json::value& value) {
  boost::json::value json = boost::json::parse(text);
  if (value.is_null() && !key.empty() && key.front() == '-') {
    json.as_object().erase(key.substr(1));
  } else {
    json.as_object()[key] = value;
  }
  return boost::json::serialize(json);
}

/// The UsageError message of parsing `text` as config.json, or "" when it parses.
inline std::string error_of(const std::string& text) {
  try {
    parse_model_config(text, "config.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace zt::testing
