// GEMMs through cuBLASLt, row-major as the rest of zerotrain: D[m,n] = op(A)[m,k] @ op(B)[k,n]
// (+ D when accumulate) (+ bias[n] when given, fused as cuBLASLt's BIAS epilogue). fp32 computes
// in fp32 with TF32 off unless `allow_tf32`; bf16 and fp16 inputs accumulate in fp32 and write D
// in their own dtype (or fp32). Enqueued on ctx.compute. Each matrix is densely packed unless its
// leading dimension is given: the row stride, in elements, of the row-major matrix as stored
// (lda for A stored [m,k], or [k,m] when trans_a; ldb for B stored [k,n], or [n,k] when trans_b;
// ldd for D [m,n]), at least its row length. A classifier's logits [rows,V] padded to a row stride
// of V rounded up keep every row 16-byte aligned, which cuBLASLt's tensor-core kernels need.
#pragma once

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"

namespace zt::cuda {

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
};

void gemm(CudaContext& ctx, const GemmArgs& args);

}  // namespace zt::cuda
