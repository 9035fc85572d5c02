#include "config/json_pretty.h"

#include <boost/json/serialize.hpp>

namespace zt {

std::string pretty_json(const boost::json::value& value, int indent) {
  const std::string pad(size_t(indent + 2), ' '), close(size_t(indent), ' ');
  if (value.is_object() && !value.get_object().empty()) {
    std::string out = "{\n";
    bool first = true;
    for (const auto& [key, item] : value.get_object()) {
      out += (first ? "" : ",\n") + pad + boost::json::serialize(boost::json::value(key)) + ": " +
             pretty_json(item, indent + 2);
      first = false;
    }
    return out + "\n" + close + "}";
  }
  if (value.is_array() && !value.get_array().empty()) {
    std::string out = "[\n";
    bool first = true;
    for (const auto& item : value.get_array()) {
      out += (first ? "" : ",\n") + pad + pretty_json(item, indent + 2);
      first = false;
    }
    return out + "\n" + close + "]";
  }
  return boost::json::serialize(value);
}

}  // namespace zt
