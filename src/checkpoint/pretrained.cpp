#include "checkpoint/pretrained.h"

#include <algorithm>

#include "core/error.h"

namespace zt {
namespace {

// The name of a GPT-2 tensor in a pretrained file: HF's GPT2LMHeadModel saves
// "transformer.h.0...", checkpoints saved from the bare GPT2Model (the hub's original gpt2) "h.0...".
std::string pretrained_name(const SafetensorsReader& weights, const std::string& name) {
  const std::string prefix = "transformer.";
  if (!weights.has(name) && name.rfind(prefix, 0) == 0 && weights.has(name.substr(prefix.size()))) {
    return name.substr(prefix.size());
  }
  return name;
}

}  // namespace

void check_pretrained(const SafetensorsReader& weights, const ModelLayout& layout, const std::string& dir) {
  for (const auto& p : layout.params()) {
    const std::string name = pretrained_name(weights, p.name);
    ZT_USAGE_CHECK(weights.has(name), dir, ": no tensor '", p.name, "' in the model's safetensors");
    ZT_USAGE_CHECK(weights.spec(name).shape == p.shape, dir, ": tensor '", p.name, "' has another shape than ",
                   "config.json implies");
  }
}

StateSource pretrained_source(const SafetensorsReader& weights, const ModelLayout& layout) {
  auto read = [&weights, &layout](StateField, size_t lo, size_t hi, float* out) {
    // The gaps first: the engine's buffers are not zeroed, and padding must stay zero.
    std::fill(out, out + (hi - lo), 0.0f);
    for (const auto& p : layout.params()) {
      const size_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
      if (b > a) weights.read(pretrained_name(weights, p.name), a - p.offset, b - a, out + (a - lo));
    }
  };
  return {read, false, std::nullopt, nullptr, nullptr, nullptr, nullptr};
}

}  // namespace zt
