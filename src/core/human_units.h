// Numbers as people read them in logs: counts with HF's model-size suffixes, bytes in decimal
// units.
#pragma once

#include <string>

namespace zt {

/// "842.5k", "124.44M", "4.33B".
std::string human_count(double x);
/// "512 B", "37.11 MB", "4.33 GB": decimal units, as `ls -h --si` and DeepSpeed's logs print them.
std::string human_bytes(double x);

}  // namespace zt
