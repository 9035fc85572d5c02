// GEMMs with bf16 inputs and fp32 accumulation through oneDNN (its AMX or AVX512-BF16 kernels),
// for the CPU kernels' bf16 matmul mode: DeepSpeed's bf16 runs its matmuls in bf16, and on a CPU
// with bf16 instructions that is where the speed of bf16 training comes from. The fp32 operands
// are rounded to bf16 (nearest even) into scratch first; the product and C stay fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zt::cpu {

class Bf16Gemm {
 public:
  /// The oneDNN GEMM when this CPU has bf16 instructions (and ZT_CPU_ISA does not force AVX2),
  /// else null: there bf16 inputs would only add conversions, so GEMMs stay fp32.
  static std::unique_ptr<Bf16Gemm> make_if_fast();
  ~Bf16Gemm();
  /// C[M,N] = op(A) @ op(B) + beta C, row-major as gemm.h, with A and B rounded to bf16.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, const float* B, float beta, float* C);
  /// "oneDNN 2.6 bf16 (avx512_core_amx)": for logs.
  std::string describe() const;

 private:
  Bf16Gemm();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The process's Bf16Gemm (make_if_fast, made once), or null.
Bf16Gemm* shared_bf16_gemm();

}  // namespace zt::cpu
