// The Backend interface: where memory lives and where kernels run. The CPU backend always builds;
// the CUDA backend implements the same interface. Nothing above backend/ knows which one it has.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backend/kernel_ops.h"
#include "backend/optimizer_ops.h"
#include "core/memory_pool.h"

namespace zt {

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// A description for logs: SIMD level, threads, BLAS.
  virtual std::string describe() const = 0;

  /// Allocates from a pool with byte accounting (device memory on a GPU; host memory on the CPU).
  virtual void* allocate(Pool pool, size_t bytes) = 0;
  virtual void deallocate(Pool pool, void* ptr, size_t bytes) = 0;
  /// Copies between any two pools (device<->host on a GPU). Ordered with the kernels.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// Waits for every kernel and copy issued so far.
  virtual void synchronize() = 0;

  /// Compute kernels in fp32.
  virtual KernelOps<float>& ops() = 0;
  /// Compute kernels in fp64, for gradient checks; null when the backend has none.
  virtual KernelOps<double>* ops_f64() = 0;
  /// Optimizer and mixed-precision kernels over flat buffers.
  virtual OptimizerOps& optimizer_ops() = 0;
};

/// The CPU backend (OpenBLAS + OpenMP + SIMD, AVX2 or AVX-512 chosen at run time).
std::unique_ptr<Backend> make_cpu_backend();

/// The CPU's optimizer kernels (OpenMP + SIMD) on host memory, whatever the backend: the
/// offloaded optimizer (ZeRO-Offload) steps with these.
OptimizerOps& host_optimizer_ops();

}  // namespace zt
