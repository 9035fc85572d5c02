// The CPU backend: host memory stands in for every pool, kernels run on the calling thread's
// OpenMP team, and "asynchronous" copies are synchronous.
#include <omp.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/cpu_features.h"
#include "core/error.h"

namespace zt {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() : isa_(active_cpu_isa()) {
    if (isa_ == CpuIsa::kAvx512) {
      kernels_ = cpu::make_kernels_f32_avx512();
      optimizer_ = cpu::make_optimizer_kernels_avx512();
    } else {
      kernels_ = cpu::make_kernels_f32_avx2();
      optimizer_ = cpu::make_optimizer_kernels_avx2();
    }
    kernels_f64_ = cpu::make_kernels_f64();
  }

  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    return cat("cpu (", cpu_isa_name(isa_), ", ", omp_get_max_threads(), " OpenMP threads, OpenBLAS ",
               openblas_get_config(), ")");
  }

  void* allocate(Pool pool, size_t bytes) override { return pool_alloc(pool, bytes); }
  void deallocate(Pool pool, void* ptr, size_t bytes) override { pool_free(pool, ptr, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  KernelOps<float>& ops() override { return *kernels_; }
  KernelOps<double>* ops_f64() override { return kernels_f64_.get(); }
  OptimizerOps& optimizer_ops() override { return *optimizer_; }

 private:
  CpuIsa isa_;
  std::unique_ptr<KernelOps<float>> kernels_;
  std::unique_ptr<KernelOps<double>> kernels_f64_;
  std::unique_ptr<OptimizerOps> optimizer_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

OptimizerOps& host_optimizer_ops() {
  static const std::unique_ptr<OptimizerOps> ops = active_cpu_isa() == CpuIsa::kAvx512
                                                       ? cpu::make_optimizer_kernels_avx512()
                                                       : cpu::make_optimizer_kernels_avx2();
  return *ops;
}

}  // namespace zt
