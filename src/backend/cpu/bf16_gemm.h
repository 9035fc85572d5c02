// GEMMs with bf16 inputs and fp32 accumulation through oneDNN (its AMX or AVX512-BF16 kernels).
// DeepSpeed's bf16 runs its matmuls in bf16, and on a CPU with bf16 instructions that is where
// the speed of bf16 training comes from. Two entries: bf16 operands as they lie (the bf16
// kernels' activations and weights: nothing converted), and fp32 operands rounded to bf16 (nearest
// even) into scratch first (the fp32 kernels' bf16 matmul mode, a bf16 run with fp32 activations).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/kernel_ops.h"
#include "core/dtype.h"

namespace zt::cpu {

class Bf16Gemm {
 public:
  /// The oneDNN GEMM where it multiplies faster than fp32 GEMMs: a CPU with bf16 instructions
  /// (cpu_has_bf16_gemm_instructions) and AMX, or an AMD CPU with AVX512-BF16; else null, and bf16
  /// operands are widened to fp32 for OpenBLAS. ZT_BF16_GEMM=bf16 takes oneDNN wherever the CPU
  /// has the instructions, ZT_BF16_GEMM=fp32 never (auto: the rule above).
  static std::unique_ptr<Bf16Gemm> make_if_fast();
  /// The oneDNN GEMM wherever the CPU has the instructions, faster or not (tests), else null.
  static std::unique_ptr<Bf16Gemm> make_if_supported();
  ~Bf16Gemm();
  /// C[M,N] = op(A) @ op(B) + beta C, row-major as gemm.h, with A and B rounded to bf16.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, const float* B, float beta, float* C);
  /// C[M,N] = op(A) @ op(B) (+ bias, a row of N added to each row) (+ C where beta is 1), A and B
  /// bf16 as stored, row-major with leading dimensions lda and ldb (op(A) is A's transpose where
  /// trans_a: A stored [K, M]), summed in fp32 and C rounded to bf16 once.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
            float beta, bf16* C, int ldc, const bf16* bias = nullptr);
  /// The same into fp32 C (a parameter gradient, an attention score).
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
            float beta, float* C, int ldc);
  /// Weight packs (KernelOps::weight_packs): a product whose B lies in a kept range reads B from
  /// a copy in the blocked layout oneDNN's kernels want, made at its first use after kKeep or
  /// kStale (one per weight, shape and transposition: a weight's forward and its dx), instead of
  /// copying B into the scratchpad on every call, on every thread. Not concurrent with products.
  void weight_packs(const void* lo, const void* hi, WeightPacks what);
  /// Bytes the packs hold now (counted in the device pool).
  size_t weight_pack_bytes() const;
  /// Bytes of one pack of a K x N operand (oneDNN's layout on this CPU, padded to its blocks).
  size_t pack_bytes(int K, int N) const;
  /// "oneDNN 2.6 bf16 (avx512_core_amx)": for logs.
  std::string describe() const;

 private:
  Bf16Gemm();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The process's Bf16Gemm (make_if_fast, made once), or null.
Bf16Gemm* shared_bf16_gemm();

/// Whether oneDNN can multiply bf16 operands on this CPU (AVX512-BF16 or AMX; not where
/// ZT_CPU_ISA=avx2), whichever make_if_fast chooses.
bool cpu_has_bf16_gemm_instructions();

/// Whether the bf16 kernels keep weight packs where their GEMMs are oneDNN's: where
/// ZT_BF16_WEIGHT_PACKS=1 (0 or unset: no; anything else is a usage error).
bool bf16_weight_packs_enabled();

/// How a bf16 run's GEMMs multiply here, for logs: "bf16 GEMMs: oneDNN 2.6 bf16
/// (avx512_core_amx)" or "bf16 GEMMs: fp32 on widened operands (...why)".
std::string bf16_gemm_description();

}  // namespace zt::cpu
