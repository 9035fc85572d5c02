// The build (core/build_info.h) as the JSON object that metrics.jsonl's start event and every
// checkpoint manifest carry under "build".
#pragma once

#include <boost/json.hpp>

#include "core/build_info.h"

namespace zt {

inline boost::json::object build_info_json() {
  boost::json::object o;
  for (const auto& [key, value] : build_info()) o[key] = value;
  return o;
}

}  // namespace zt
