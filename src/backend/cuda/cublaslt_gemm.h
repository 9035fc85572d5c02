// GEMMs through cuBLASLt, row-major as the rest of zerotrain: D[m,n] = op(A)[m,k] @ op(B)[k,n]
// (+ D when accumulate) (+ bias[n] when given, fused as cuBLASLt's BIAS epilogue). fp32 computes
// in fp32 with TF32 off unless `allow_tf32`; bf16 and fp16 inputs accumulate in fp32 and write D
// in their own dtype (or fp32). Enqueued on ctx.compute.
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
};

void gemm(CudaContext& ctx, const GemmArgs& args);

}  // namespace zt::cuda
