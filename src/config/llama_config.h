// The Llama family's config.json keys (model_type llama, mistral, qwen2), read into ModelConfig
// by parse_model_config and written back by model_config_to_json.
#pragma once

#include <boost/json/object.hpp>

#include "config/json_section.h"
#include "config/model_config.h"

namespace zt {

/// Reads the keys of LlamaConfig, MistralConfig or Qwen2Config (m.model_type says which); a key
/// that is absent takes that class's default, as HF does. Warnings wait for the whole file to pass.
void read_llama_family(JsonSection& s, const boost::json::object& keys, ModelConfig& m,
                       std::vector<std::string>& warnings);
/// The config.json HF writes for `m`, without torch_dtype.
boost::json::object llama_family_json(const ModelConfig& m);

}  // namespace zt
