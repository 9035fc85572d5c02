#include "backend/cuda/lazy_library.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>

#include "core/error.h"

namespace zt::cuda {

void* lazy_symbol(const char* soname, const char* fallback_dir, const char* symbol) {
  static std::mutex mutex;
  static std::map<std::string, void*> handles;  // never closed: the symbols live as long as the process
  std::lock_guard<std::mutex> lock(mutex);
  void*& handle = handles[soname];
  if (!handle) {
    // RTLD_LOCAL: the library's symbols must not stand in for these forwarding definitions.
    handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const std::string first = dlerror();
      const std::string path = cat(fallback_dir, "/", soname);
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) throw Error(cat("cannot load ", soname, ": ", first, "; nor ", path, ": ", dlerror()));
    }
  }
  dlerror();
  void* address = dlsym(handle, symbol);
  if (!address) throw Error(cat(soname, " has no ", symbol, ": ", dlerror()));
  return address;
}

}  // namespace zt::cuda
