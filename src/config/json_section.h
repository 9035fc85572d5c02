// Strict, typed access to one JSON object of a config file. Every key read is recorded; finish()
// then rejects whatever was not read: a DeepSpeed key zerotrain does not implement gets an error
// that says so, anything else is unknown and gets the closest known key as a suggestion.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

/// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `key` by edit distance (empty when there are no candidates).
std::string closest_key(std::string_view key, const std::vector<std::string>& candidates);

class JsonSection {
 public:
  /// `object` may be null (the section is absent): every read then leaves its default.
  JsonSection(const boost::json::object* object, std::string path, std::string source);

  bool present() const { return object_ != nullptr; }
  bool has(std::string_view key) const;
  /// True when the key holds the string "auto".
  bool is_auto(std::string_view key) const;

  // Typed reads: absent or null leaves `out` unchanged and returns false. A wrong type is an
  // error naming the key. Integers accept integral JSON numbers written as 5e8.
  bool read(std::string_view key, bool& out);
  bool read(std::string_view key, int64_t& out, std::optional<int64_t> min = {},
            std::optional<int64_t> max = {});
  bool read(std::string_view key, int& out, std::optional<int64_t> min = {},
            std::optional<int64_t> max = {});
  bool read(std::string_view key, double& out, std::optional<double> min = {},
            std::optional<double> max = {});
  bool read(std::string_view key, std::string& out);
  /// Reads an array of exactly `count` numbers.
  bool read_numbers(std::string_view key, std::vector<double>& out, size_t count);

  /// A nested object; absent gives a section whose reads all keep defaults.
  JsonSection child(std::string_view key);

  /// Marks keys that DeepSpeed knows but zerotrain does not implement. If present they are
  /// errors in finish(), with `why`.
  void not_implemented(std::initializer_list<const char*> keys, const std::string& why);
  /// Marks a key as known and consumed without reading it (the caller checked it by hand).
  void mark_read(std::string_view key);
  /// Rejects every key not read. Call after all reads.
  void finish() const;

  /// "zero_optimization.stage": the dotted path of a key, for messages.
  std::string key_path(std::string_view key) const;
  /// Throws UsageError "<source>: <path.key>: <what>".
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;

 private:
  const boost::json::value* find(std::string_view key);

  const boost::json::object* object_;
  std::string path_, source_;
  std::set<std::string, std::less<>> read_;
  std::vector<std::pair<std::string, std::string>> unimplemented_;  // key, why
};

}  // namespace zt
