// The CPU kernels at the build's AVX2 baseline (float and double).
#include "backend/cpu/cpu_kernels.h"

#define ZT_ISA_NS avx2
#include "backend/cpu/cpu_kernels.inc"

namespace zt::cpu {
std::unique_ptr<KernelOps<float>> make_kernels_f32_avx2() {
  choose_openblas_core();
  return std::make_unique<avx2::CpuKernels<float>>();
}
std::unique_ptr<KernelOps<double>> make_kernels_f64() {
  choose_openblas_core();
  return std::make_unique<avx2::CpuKernels<double>>();
}
std::unique_ptr<OptimizerOps> make_optimizer_kernels_avx2() { return std::make_unique<avx2::CpuOptimizerKernels>(); }
}  // namespace zt::cpu
