// Factories for the CPU kernel tables, one per SIMD level (see cpu_kernels.inc).
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/openblas_core.h"
#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/fast_math.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/invariant_gemm.h"
#include "backend/kernel_ops.h"
#include "backend/optimizer_ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt::cpu {

std::unique_ptr<KernelOps<float>> make_kernels_f32_avx2();
std::unique_ptr<KernelOps<float>> make_kernels_f32_avx512();
std::unique_ptr<KernelOps<double>> make_kernels_f64();
/// KernelOps<bf16> over the fp32 kernels `f32` (its own), widening each op's bf16 operands
/// (host memory) a tile at a time into at most `scratch_floats` of fp32 scratch (bf16_tiles.h).
/// Asked for bf16 GEMMs (set_matmul_dtype), its GEMMs and attention run on `in_place` (the bf16
/// operands as they lie, bf16_attention.h) where that is given, else as every other op.
std::unique_ptr<KernelOps<bf16>> make_bf16_kernels(std::unique_ptr<KernelOps<float>> f32,
                                                   size_t scratch_floats = kBf16ScratchFloats,
                                                   Bf16Gemm* in_place = shared_bf16_gemm());
std::unique_ptr<OptimizerOps> make_optimizer_kernels_avx2();
std::unique_ptr<OptimizerOps> make_optimizer_kernels_avx512();

}  // namespace zt::cpu
