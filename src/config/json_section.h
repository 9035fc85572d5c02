// Strict, typed access to one JSON object of a config file. Every key read is recorded; finish()
// then rejects whatever was not read: a DeepSpeed key zerotrain does not implement gets an error
// that says so, anything else is unknown and gets "did you mean" the closest known key.
//
// DeepSpeed keys zerotrain does not act on go through neutral(), disabled_block() or
// inert_block(): at a value that changes nothing here they are accepted and one notice line is
// recorded (the caller prints it); at any other value they are an error naming key, value and why.
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
/// A JSON value as a user would write it, for messages: true, 0.001, "fp32", [1, 2].
std::string describe_json(const boost::json::value& v);
/// `text` with each control character written as \xNN: keys and values from a file are echoed in
/// messages, and one holding a newline must not break a message's one line.
std::string one_line(std::string_view text);
/// The candidate closest to `key` by edit distance (empty when there are no candidates).
std::string closest_key(std::string_view key, const std::vector<std::string>& candidates);

/// A name a block may hold, for checking the names of a block whose values are not read (a
/// disabled DeepSpeed feature). Non-empty `inner`: the value is an object holding those names.
struct KnownKey {
  std::string name;
  std::vector<KnownKey> inner = {};
};

class JsonSection {
 public:
  /// `object` may be null (the section is absent): every read then leaves its default.
  /// `notices` collects the lines of accepted no-op keys; children share it.
  JsonSection(const boost::json::object* object, std::string path, std::string source,
              std::vector<std::string>* notices = nullptr);

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
  /// errors in finish(): "<path>: <value> is not implemented: <why>".
  void not_implemented(std::initializer_list<const char*> keys, const std::string& why);

  /// A DeepSpeed key zerotrain does not act on. At one of `values` (DeepSpeed's default, or a
  /// value that changes nothing here) it is accepted with the notice "<path>: <value> accepted;
  /// changes nothing here (<why>)"; any other value fails "<path>: <value> is not implemented:
  /// <why>", so `why` says what zerotrain does. Null counts as absent unless listed. Numbers
  /// compare by value (1 == 1.0).
  void neutral(std::string_view key, std::initializer_list<boost::json::value> values, std::string_view why);
  /// neutral() for a key whose every value changes nothing here (it acts only on machinery that
  /// does not exist here). Still one notice.
  void inert(std::string_view key, std::string_view why);
  /// A DeepSpeed key that steers only how fast DeepSpeed runs, never what it computes
  /// (round_robin_gradients, ...): any value of the kind of `like` (DeepSpeed's default) is
  /// accepted with the notice "<path>: <value> accepted as a performance hint (<instead>)", where
  /// `instead` says what zerotrain does in its place; a value of another kind fails.
  void performance_hint(std::string_view key, const boost::json::value& like, std::string_view instead);
  /// A DeepSpeed feature block zerotrain does not have, switched by `switch_key` (usually
  /// "enabled"). Absent, or with the switch absent and `off_when_absent`, or at one of `off`: the
  /// block is accepted whole with one notice and only its names are checked against `keys`
  /// (at every level given). Otherwise "<path>.<switch>: <value> is not implemented: <why>".
  void disabled_block(std::string_view key, std::string_view switch_key, std::initializer_list<boost::json::value> off,
                      bool off_when_absent, const std::vector<KnownKey>& keys, std::string_view why);
  /// A block that acts only through code zerotrain does not have (a model calling into
  /// deepspeed.checkpointing, ...): accepted whole at any value with one notice; names checked.
  void inert_block(std::string_view key, const std::vector<KnownKey>& keys, std::string_view why);
  /// Marks `keys` as known without reading their values; nested names are checked.
  void known(const std::vector<KnownKey>& keys);
  /// Records "<source>: <path.key>: <what>" as a notice.
  void notice(std::string_view key, std::string_view what) const;
  /// Marks a key as known and consumed without reading it (the caller checked it by hand).
  void mark_read(std::string_view key);
  /// Rejects every key not read. Call after all reads.
  void finish() const;

  /// The file the section was read from, for messages.
  const std::string& source() const { return source_; }
  /// "zero_optimization.stage": the dotted path of a key, for messages.
  std::string key_path(std::string_view key) const;
  /// The raw value of a present key (null included), or nullptr; marks the key read.
  const boost::json::value* raw(std::string_view key);
  /// Throws UsageError "<source>: <path.key>: <what>".
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;

 private:
  const boost::json::value* find(std::string_view key);

  const boost::json::object* object_;
  std::string path_, source_;
  std::vector<std::string>* notices_;
  std::set<std::string, std::less<>> read_;
  std::vector<std::pair<std::string, std::string>> unimplemented_;  // key, why
};

}  // namespace zt
