#include "core/error.h"

#include <unistd.h>

namespace zt {

void throw_error(const char* file, int line, const std::string& what) {
  // The host name tells which node failed when many ranks print at once (as nccl-tests does).
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  throw Error(cat(host, " ", file, ":", line, ": ", what));
}

}  // namespace zt
