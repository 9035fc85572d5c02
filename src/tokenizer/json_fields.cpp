#include "tokenizer/json_fields.h"

#include "tokenizer/utf8.h"

namespace zt {

const boost::json::value& json_member(const boost::json::object& obj, std::string_view key) {
  static const boost::json::value null_value;
  const boost::json::value* v = obj.if_contains(key);
  return v ? *v : null_value;
}

const boost::json::object& json_object(const boost::json::value& v, const JsonWhere& where) {
  if (!v.is_object()) where.fail("expected a JSON object");
  return v.get_object();
}

const boost::json::array& json_array(const boost::json::value& v, const JsonWhere& where) {
  if (!v.is_array()) where.fail("expected a JSON array");
  return v.get_array();
}

std::string json_string(const boost::json::object& obj, std::string_view key, const JsonWhere& where,
                        const char* fallback) {
  const boost::json::value* v = obj.if_contains(key);
  if ((!v || v->is_null()) && fallback) return fallback;
  if (!v) where.at(key).fail("missing");
  if (!v->is_string()) where.at(key).fail("expected a string");
  return std::string(v->get_string());
}

std::string json_char(const boost::json::object& obj, std::string_view key, const JsonWhere& where,
                      const char* fallback) {
  std::string c = json_string(obj, key, where, fallback);
  if (c.empty() || utf8_length(static_cast<unsigned char>(c[0])) != c.size()) {
    where.at(key).fail(cat("\"", c, "\" is not one character"));
  }
  return c;
}

bool json_bool(const boost::json::object& obj, std::string_view key, const JsonWhere& where, bool fallback) {
  const boost::json::value* v = obj.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_bool()) where.at(key).fail("expected true or false");
  return v->get_bool();
}

uint32_t json_id(const boost::json::value& v, const JsonWhere& where) {
  if (v.is_int64() && v.get_int64() >= 0 && v.get_int64() <= int64_t(UINT32_MAX)) return uint32_t(v.get_int64());
  if (v.is_uint64() && v.get_uint64() <= UINT32_MAX) return uint32_t(v.get_uint64());
  where.fail("expected a token id (an integer in [0, 2^32))");
}

std::string json_type(const boost::json::object& obj, const JsonWhere& where) {
  return json_string(obj, "type", where);
}

void unsupported(const JsonWhere& where, const std::string& what, const std::string& type, const char* supported) {
  where.fail(cat(what, " \"", type, "\" is not supported (supported: ", supported, ")"));
}

}  // namespace zt
