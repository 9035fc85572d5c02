// For the harnesses of readers that keep eos_token_id (config.json of the Llama family,
// generation_config.json): the ids an accepted file gives must be the file's own, none lost and
// none cut to another id by the int they are held in (4294967298 read as 2).
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/json_reader.h"
#include "fuzz_check.h"

namespace zt::fuzz {

/// Called after `text` was accepted, with the ids the reader kept.
inline void check_eos_ids(std::string_view text, const std::string& source, const std::vector<int>& kept) {
  const boost::json::value json = parse_json_lenient(text, source);
  const boost::json::value* eos = json.get_object().if_contains("eos_token_id");
  std::vector<int64_t> ids;
  if (eos && !eos->is_null()) {
    for (const auto& v : eos->is_array() ? eos->get_array() : boost::json::array{*eos}) ids.push_back(v.as_int64());
  }
  if (ids.size() != kept.size()) finding("eos_token_id accepted with ids lost");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != kept[i]) finding("eos_token_id " + std::to_string(ids[i]) + " accepted as " + std::to_string(kept[i]));
  }
}

}  // namespace zt::fuzz
