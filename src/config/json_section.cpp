#include "config/json_section.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace zt {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_key(std::string_view key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(key, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

// The shortest decimal that reads back as the same double, as Python prints floats.
static std::string shortest_double(double d) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 1.0 stays a float
  return s;
}

std::string describe_json(const boost::json::value& v) {
  if (v.is_double()) return shortest_double(v.get_double());
  if (v.is_array()) {
    std::string out = "[";
    for (const auto& item : v.get_array()) out += (out.size() > 1 ? ", " : "") + describe_json(item);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    for (const auto& [key, item] : v.get_object()) {
      out += cat(out.size() > 1 ? ", " : "", boost::json::serialize(boost::json::string(key)), ": ", describe_json(item));
    }
    return out + "}";
  }
  return boost::json::serialize(v);
}

// Numbers compare by value whatever their JSON kind (DeepSpeed reads 1 and 1.0 alike).
static bool same_json(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_number() && b.is_number()) return a.to_number<double>() == b.to_number<double>();
  return a == b;
}

// The kind of value a key takes, for "expected ..." messages: numbers are one kind.
static int json_kind(const boost::json::value& v) { return v.is_number() ? -1 : int(v.kind()); }

JsonSection::JsonSection(const boost::json::object* object, std::string path, std::string source,
                         std::vector<std::string>* notices)
    : object_(object), path_(std::move(path)), source_(std::move(source)), notices_(notices) {}

std::string JsonSection::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : cat(path_, ".", key);
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
      out += escaped;
    }
  }
  return out;
}

void JsonSection::fail(std::string_view key, const std::string& what) const {
  throw UsageError(one_line(cat(source_, ": ", key_path(key), ": ", what)));
}

bool JsonSection::has(std::string_view key) const {
  return object_ && object_->find(key) != object_->end();
}

bool JsonSection::is_auto(std::string_view key) const {
  if (!object_) return false;
  auto it = object_->find(key);
  return it != object_->end() && it->value().is_string() && it->value().get_string() == "auto";
}

const boost::json::value* JsonSection::find(std::string_view key) {
  read_.emplace(key);
  if (!object_) return nullptr;
  auto it = object_->find(key);
  if (it == object_->end() || it->value().is_null()) return nullptr;
  if (it->value().is_string() && it->value().get_string() == "auto") {
    fail(key, "\"auto\" is not supported for this key (it has no trainer flag to come from)");
  }
  return &it->value();
}

static std::string describe(const boost::json::value& v) { return describe_json(v); }

const boost::json::value* JsonSection::raw(std::string_view key) {
  read_.emplace(key);
  if (!object_) return nullptr;
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &it->value();
}

bool JsonSection::read(std::string_view key, bool& out) {
  const auto* v = find(key);
  if (!v) return false;
  if (!v->is_bool()) fail(key, cat("expected true or false, got ", describe(*v)));
  out = v->get_bool();
  return true;
}

bool JsonSection::read(std::string_view key, int64_t& out, std::optional<int64_t> min,
                       std::optional<int64_t> max) {
  const auto* v = find(key);
  if (!v) return false;
  int64_t value = 0;
  if (v->is_int64()) {
    value = v->get_int64();
  } else if (v->is_uint64() && v->get_uint64() <= uint64_t(INT64_MAX)) {
    value = int64_t(v->get_uint64());
  } else if (v->is_double() && std::nearbyint(v->get_double()) == v->get_double() &&
             std::fabs(v->get_double()) < 9.2e18) {
    value = int64_t(v->get_double());  // DeepSpeed configs often write sizes as 5e8
  } else {
    fail(key, cat("expected an integer, got ", describe(*v)));
  }
  if (min && value < *min) fail(key, cat("must be >= ", *min, ", got ", value));
  if (max && value > *max) fail(key, cat("must be <= ", *max, ", got ", value));
  out = value;
  return true;
}

bool JsonSection::read(std::string_view key, int& out, std::optional<int64_t> min,
                       std::optional<int64_t> max) {
  int64_t wide = out;
  if (!read(key, wide, min.value_or(INT32_MIN), max.value_or(INT32_MAX))) return false;
  out = int(wide);
  return true;
}

bool JsonSection::read(std::string_view key, double& out, std::optional<double> min,
                       std::optional<double> max) {
  const auto* v = find(key);
  if (!v) return false;
  double value = 0;
  if (v->is_double()) value = v->get_double();
  else if (v->is_int64()) value = double(v->get_int64());
  else if (v->is_uint64()) value = double(v->get_uint64());
  else fail(key, cat("expected a number, got ", describe(*v)));
  if (!std::isfinite(value)) fail(key, "must be finite");
  if (min && value < *min) fail(key, cat("must be >= ", *min, ", got ", value));
  if (max && value > *max) fail(key, cat("must be <= ", *max, ", got ", value));
  out = value;
  return true;
}

bool JsonSection::read(std::string_view key, std::string& out) {
  const auto* v = find(key);
  if (!v) return false;
  if (!v->is_string()) fail(key, cat("expected a string, got ", describe(*v)));
  out = std::string(v->get_string());
  return true;
}

bool JsonSection::read_numbers(std::string_view key, std::vector<double>& out, size_t count) {
  const auto* v = find(key);
  if (!v) return false;
  if (!v->is_array() || v->get_array().size() != count) {
    fail(key, cat("expected an array of ", count, " numbers, got ", describe(*v)));
  }
  out.clear();
  for (const auto& item : v->get_array()) {
    if (!item.is_number()) fail(key, cat("expected numbers, got ", describe(*v)));
    out.push_back(item.to_number<double>());
  }
  return true;
}

JsonSection JsonSection::child(std::string_view key) {
  const auto* v = find(key);
  if (v && !v->is_object()) fail(key, cat("expected an object, got ", describe(*v)));
  return JsonSection(v ? &v->get_object() : nullptr, key_path(key), source_, notices_);
}

void JsonSection::not_implemented(std::initializer_list<const char*> keys, const std::string& why) {
  for (const char* k : keys) unimplemented_.emplace_back(k, why);
}

void JsonSection::notice(std::string_view key, std::string_view what) const {
  if (notices_) notices_->push_back(cat(source_, ": ", key_path(key), ": ", what));
}

void JsonSection::neutral(std::string_view key, std::initializer_list<boost::json::value> values,
                          std::string_view why) {
  const boost::json::value* v = raw(key);
  if (!v) return;
  for (const auto& n : values) {
    if (same_json(*v, n)) {
      notice(key, cat(describe(*v), " accepted; changes nothing here (", why, ")"));
      return;
    }
  }
  if (v->is_null()) return;  // DeepSpeed reads null as the default
  if (v->is_string() && v->get_string() == "auto") find(key);  // the usual "auto" error
  if (values.size() > 0 && !values.begin()->is_null() && json_kind(*v) != json_kind(*values.begin())) {
    fail(key, cat("expected a value like ", describe(*values.begin()), ", got ", describe(*v)));
  }
  fail(key, cat(describe(*v), " is not implemented: ", why));
}

void JsonSection::inert(std::string_view key, std::string_view why) {
  const boost::json::value* v = raw(key);
  if (v) notice(key, cat(describe(*v), " accepted; changes nothing here (", why, ")"));
}

void JsonSection::performance_hint(std::string_view key, const boost::json::value& like, std::string_view instead) {
  const boost::json::value* v = raw(key);
  if (!v || v->is_null()) return;  // DeepSpeed reads null as the default
  if (v->is_string() && v->get_string() == "auto") find(key);  // the usual "auto" error
  if (json_kind(*v) != json_kind(like)) fail(key, cat("expected a value like ", describe(like), ", got ", describe(*v)));
  notice(key, cat(describe(*v), " accepted as a performance hint (", instead, ")"));
}

void JsonSection::known(const std::vector<KnownKey>& keys) {
  for (const auto& k : keys) {
    if (k.inner.empty()) {
      mark_read(k.name);
      continue;
    }
    JsonSection nested = child(k.name);
    nested.known(k.inner);
    nested.finish();
  }
}

void JsonSection::disabled_block(std::string_view key, std::string_view switch_key,
                                 std::initializer_list<boost::json::value> off, bool off_when_absent,
                                 const std::vector<KnownKey>& keys, std::string_view why) {
  JsonSection block = child(key);
  if (!block.present()) return;
  const boost::json::value* on = block.raw(switch_key);
  if (on && on->is_null()) on = nullptr;  // DeepSpeed reads null as the default
  const bool is_off = on ? std::any_of(off.begin(), off.end(), [&](const auto& o) { return same_json(*on, o); })
                         : off_when_absent;
  if (!is_off) {
    if (!on) block.fail(switch_key, cat("absent, which DeepSpeed reads as on, is not implemented: ", why));
    block.fail(switch_key, cat(describe(*on), " is not implemented: ", why));
  }
  block.known(keys);
  block.finish();
  if (on) {
    block.notice(switch_key, cat(describe(*on), " accepted; changes nothing here (", why, ")"));
  } else {
    notice(key, cat("accepted with ", switch_key, " absent (off); changes nothing here (", why, ")"));
  }
}

void JsonSection::inert_block(std::string_view key, const std::vector<KnownKey>& keys, std::string_view why) {
  JsonSection block = child(key);
  if (!block.present()) return;
  block.known(keys);
  block.finish();
  notice(key, cat("accepted; changes nothing here (", why, ")"));
}

void JsonSection::mark_read(std::string_view key) { read_.emplace(key); }

void JsonSection::finish() const {
  if (!object_) return;
  for (const auto& [key, value] : *object_) {
    if (read_.count(key)) continue;
    for (const auto& [name, why] : unimplemented_) {
      if (name == key) fail(key, cat(describe(value), " is not implemented: ", why));
    }
    std::vector<std::string> known(read_.begin(), read_.end());
    for (const auto& u : unimplemented_) known.push_back(u.first);
    std::string hint = closest_key(key, known);
    fail(key, hint.empty() ? std::string("unknown key")
                           : cat("unknown key; did you mean '", key_path(hint), "'?"));
  }
}

}  // namespace zt
