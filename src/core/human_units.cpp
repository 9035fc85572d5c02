#include "core/human_units.h"

#include <cstdio>

namespace zt {

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", x);
  return buf;
}

std::string human_bytes(double x) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (x >= 1000 && u < 5) {
    x /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", x, kUnits[u]);
  return buf;
}

}  // namespace zt
