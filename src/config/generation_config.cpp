#include "config/generation_config.h"

#include <cstdint>
#include <filesystem>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "core/error.h"

namespace zt {

GenerationConfig load_generation_config(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  return parse_generation_config(read_json_text(path), path);
}

GenerationConfig parse_generation_config(std::string_view text, const std::string& source) {
  GenerationConfig g;
  const boost::json::value json = parse_json_lenient(text, source);
  if (!json.is_object()) throw UsageError(cat(source, ": expected a JSON object"));
  const boost::json::object& keys = json.get_object();
  JsonSection s(&keys, "", source);
  bool flag = false;
  if (s.read("do_sample", flag)) g.do_sample = flag;
  double x = 0;
  if (s.read("temperature", x, 0.0)) g.temperature = x;
  if (s.read("top_p", x, 0.0, 1.0)) g.top_p = x;
  int n = 0;
  if (s.read("top_k", n, 0)) g.top_k = n;
  if (s.read("max_new_tokens", n, 1)) g.max_new_tokens = n;
  if (const auto* eos = keys.if_contains("eos_token_id"); eos && !eos->is_null()) {
    for (const auto& v : eos->is_array() ? eos->get_array() : boost::json::array{*eos}) {
      // Held as int: a larger id must be refused, not cut (4294967298 would stop at id 2).
      if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > INT32_MAX) {
        s.fail("eos_token_id", cat("expected token ids, got ", describe_json(v)));
      }
      g.eos_token_ids.push_back(int(v.as_int64()));
    }
  }
  // What changes HF's choice of tokens but is not done here, at a value that changes something.
  const std::pair<const char*, double> neutral[] = {{"repetition_penalty", 1.0}, {"num_beams", 1.0},
                                                   {"no_repeat_ngram_size", 0.0}, {"typical_p", 1.0},
                                                   {"min_p", 0.0}, {"epsilon_cutoff", 0.0}, {"eta_cutoff", 0.0},
                                                   {"min_new_tokens", 0.0}, {"min_length", 0.0}};
  for (const auto& [key, off] : neutral) {
    const auto* v = keys.if_contains(key);
    if (v && v->is_number() && v->to_number<double>() != off) g.not_applied.push_back(cat(key, " ", describe_json(*v)));
  }
  return g;
}

}  // namespace zt
