// GEMMs through cuBLASLt, row-major as the rest of zerotrain: D[m,n] = op(A)[m,k] @ op(B)[k,n]
// (+ D when accumulate) (+ bias[n] when given, fused as cuBLASLt's BIAS epilogue). fp32 computes
// in fp32 with TF32 off unless `allow_tf32`; bf16 and fp16 inputs accumulate in fp32 and write D
// in their own dtype (or fp32). Enqueued on ctx.compute. Each matrix is densely packed unless its
// leading dimension is given: the row stride, in elements, of the row-major matrix as stored
// (lda for A stored [m,k], or [k,m] when trans_a; ldb for B stored [k,n], or [n,k] when trans_b;
// ldd for D [m,n]), at least its row length. A classifier's logits [rows,V] padded to a row stride
// of V rounded up keep every row 16-byte aligned, which cuBLASLt's tensor-core kernels need.
//
// Fused neighbours (cuBLASLt's epilogues), so that a GEMM's output is not read back by a kernel
// of its own: a separate addend C (D = op(A) op(B) + C + bias: a residual branch's projection
// adds the residual), the GELU with its input kept for the backward (GELU_AUX_BIAS), and the
// GELU's gradient applied to the product (DGELU). try_gemm says when cuBLASLt has no algorithm
// for the combination, so that the caller can compose it from a plain GEMM and a kernel.
#pragma once

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"

namespace zt::cuda {

enum class GemmEpilogue {
  kNone,
  kGeluAux,  // D = gelu_tanh(P) with P = op(A) op(B) (+ bias), and P written to aux
  kDGelu,    // D = gelu_tanh'(aux) * op(A) op(B): the backward of kGeluAux's GELU, aux = its P
};

struct GemmArgs {
  bool trans_a = false, trans_b = false;  // op(A) = A^T when trans_a (A stored [k,m] then)
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  DType ab_dtype = DType::kF32;  // A and B
  DType d_dtype = DType::kF32;
  const void* bias = nullptr;    // [n] in d_dtype, or null; not with accumulate
  bool accumulate = false;       // D += instead of D =
  bool allow_tf32 = false;
  int lda = 0, ldb = 0, ldd = 0;  // row strides in elements of A, B and D as stored; 0: densely packed
  const void* c = nullptr;        // an addend [m,n] in d_dtype with D's row stride (not D: that is accumulate)
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* aux = nullptr;  // the GELU's input [m,n] in d_dtype, densely packed: written (kGeluAux) or read (kDGelu)
};

/// Runs the GEMM, or fails with cuBLASLt's reason (no algorithm for the shape included).
void gemm(CudaContext& ctx, const GemmArgs& args);
/// Runs the GEMM and returns true, or returns false without enqueuing anything where cuBLASLt
/// has no algorithm for it (a GELU epilogue or an addend on a shape or alignment it does not
/// take): the caller then composes the op. Each such shape is logged once as a warning and
/// counted (gemm_counts), since a composed op is correct but slower.
bool try_gemm(CudaContext& ctx, const GemmArgs& args);

/// This process's GEMM calls so far, for tests and benchmarks to see which path ran.
struct GemmCounts {
  size_t fused_launches = 0;  ///< GEMMs enqueued with an addend or a GELU epilogue
  size_t declined_calls = 0;  ///< calls gemm or try_gemm found no algorithm for
};
GemmCounts gemm_counts();

}  // namespace zt::cuda
