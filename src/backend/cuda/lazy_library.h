// cuBLASLt and NCCL are loaded when first called, not when a program starts: linked normally,
// their relocations alone cost every process (a CPU run's ranks, every tool) about 90 MB of
// private memory and 150 MB of resident size. So the programs do not link them; instead
// cublaslt_lazy.cpp and comm/nccl_lazy.cpp define the few functions zerotrain calls, each of
// which finds the library's own on first use (dlopen, dlsym) and forwards to it. The CUDA runtime
// itself is small and stays linked.
#pragma once

namespace zt::cuda {

/// The address of `symbol` in the shared library `soname` (opened once, RTLD_LOCAL, from the
/// loader's search path, else from `fallback_dir`). Throws zt::Error naming both and dlerror().
void* lazy_symbol(const char* soname, const char* fallback_dir, const char* symbol);

}  // namespace zt::cuda

/// Inside a forwarding definition of `fn`: `real` is the library's own `fn`, found on first use.
#define ZT_LAZY_REAL(soname, dir, fn) \
  static const auto real = reinterpret_cast<decltype(&fn)>(::zt::cuda::lazy_symbol(soname, dir, #fn))
