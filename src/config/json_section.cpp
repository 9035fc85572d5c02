#include "config/json_section.h"

#include <algorithm>
#include <cmath>

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

JsonSection::JsonSection(const boost::json::object* object, std::string path, std::string source)
    : object_(object), path_(std::move(path)), source_(std::move(source)) {}

std::string JsonSection::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : cat(path_, ".", key);
}

void JsonSection::fail(std::string_view key, const std::string& what) const {
  throw UsageError(cat(source_, ": ", key_path(key), ": ", what));
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

static std::string describe(const boost::json::value& v) {
  return boost::json::serialize(v);
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
  if (!read(key, wide, min, max.value_or(INT32_MAX))) return false;
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
  return JsonSection(v ? &v->get_object() : nullptr, key_path(key), source_);
}

void JsonSection::not_implemented(std::initializer_list<const char*> keys, const std::string& why) {
  for (const char* k : keys) unimplemented_.emplace_back(k, why);
}

void JsonSection::mark_read(std::string_view key) { read_.emplace(key); }

void JsonSection::finish() const {
  if (!object_) return;
  for (const auto& [key, value] : *object_) {
    if (read_.count(key)) continue;
    for (const auto& [name, why] : unimplemented_) {
      if (name == key) fail(key, cat("DeepSpeed key not implemented by zerotrain: ", why));
    }
    std::vector<std::string> known(read_.begin(), read_.end());
    for (const auto& u : unimplemented_) known.push_back(u.first);
    std::string hint = closest_key(key, known);
    fail(key, hint.empty() ? std::string("unknown key")
                           : cat("unknown key; the closest known key is '", key_path(hint), "'"));
  }
}

}  // namespace zt
