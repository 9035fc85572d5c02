// An HF model folder's generation_config.json: the defaults HF generate takes for sampling and
// stopping, which zero_generate takes too unless a flag overrides them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

struct GenerationConfig {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p;
  std::optional<int> top_k, max_new_tokens;
  std::vector<int> eos_token_ids;  ///< an id or a list of them
  /// Settings HF would apply that zero_generate does not (a repetition penalty, beams), as
  /// "key value" for a warning.
  std::vector<std::string> not_applied;
};

/// Reads `path` (absent: all defaults). Bad values are UsageErrors naming the file and key.
GenerationConfig load_generation_config(const std::string& path);
/// The same from the file's text; `source` names it in errors.
GenerationConfig parse_generation_config(std::string_view text, const std::string& source);

}  // namespace zt
