#include "config/sizes.h"

#include <cmath>
#include <map>

#include "core/error.h"

namespace zt {

uint64_t parse_size(const std::string& text, SizeKind kind, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw UsageError(cat(what, ": not a number: '", text, "'"));
  }
  const std::string suffix = text.substr(used);
  static const std::map<std::string, double> counts = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9},
                                                       {"T", 1e12}};
  static const std::map<std::string, double> si = {
      {"", 1},        {"B", 1},          {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12},   {"KiB", 0x1p10},   {"MiB", 0x1p20},   {"GiB", 0x1p30},   {"TiB", 0x1p40}};
  static const std::map<std::string, double> memory = {
      {"", 1},        {"B", 1},          {"KB", 0x1p10},    {"MB", 0x1p20},    {"GB", 0x1p30},
      {"TB", 0x1p40}, {"KiB", 0x1p10},   {"MiB", 0x1p20},   {"GiB", 0x1p30},   {"TiB", 0x1p40}};
  const auto& table = kind == SizeKind::kCount ? counts : kind == SizeKind::kBytesSI ? si : memory;
  const auto it = table.find(suffix);
  if (it == table.end()) {
    std::string known;
    for (const auto& [name, scale] : table) {
      if (!name.empty()) known += (known.empty() ? "" : ", ") + name;
    }
    throw UsageError(cat(what, ": unknown suffix '", suffix, "' in '", text, "' (one of ", known, ")"));
  }
  ZT_USAGE_CHECK(std::isfinite(value) && value > 0, what, ": must be positive, got '", text, "'");
  const double result = std::round(value * it->second);
  ZT_USAGE_CHECK(result >= 1 && result < 0x1p63, what, ": '", text, "' is out of range");
  return uint64_t(result);
}

}  // namespace zt
