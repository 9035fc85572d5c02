// The CPU kernels compiled for AVX-512. Every header is included before the target pragma, so
// inline functions from headers keep the AVX2 baseline in their out-of-line copies (no AVX-512
// instruction can leak into code that runs on an AVX2-only machine); only the code below is
// compiled for AVX-512, and it runs only when cpu_has_avx512() says so.
#include "backend/cpu/cpu_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")
#define ZT_ISA_NS avx512
#include "backend/cpu/cpu_kernels.inc"

namespace zt::cpu {
std::unique_ptr<KernelOps<float>> make_kernels_f32_avx512() {
  choose_openblas_core();
  return std::make_unique<avx512::CpuKernels<float>>();
}
std::unique_ptr<OptimizerOps> make_optimizer_kernels_avx512() { return std::make_unique<avx512::CpuOptimizerKernels>(); }
}  // namespace zt::cpu
#pragma GCC pop_options
