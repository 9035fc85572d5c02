// JSON for people to read and edit (a ds_config.json to save): two-space indentation, one key per
// line. Boost.JSON 1.81 only serializes compactly.
#pragma once

#include <boost/json/value.hpp>
#include <string>

namespace zt {

std::string pretty_json(const boost::json::value& value, int indent = 0);

}  // namespace zt
