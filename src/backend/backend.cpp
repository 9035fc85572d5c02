#include "backend/backend.h"

namespace zt {

void Backend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  copy_async(host_dst, src, bytes, compute_stream());
  synchronize(compute_stream());
}

void Backend::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  copy_async(dst, host_src, bytes, compute_stream());
  synchronize(compute_stream());
}

}  // namespace zt
