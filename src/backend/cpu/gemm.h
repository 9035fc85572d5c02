// Row-major GEMM through OpenBLAS (cblas), for float and double.
#pragma once

#include <cblas.h>

namespace zt::cpu {

/// C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major, leading dimensions from the shapes.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 const double* B, double beta, double* C) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

/// The same with explicit leading dimensions: operands whose rows are strided (a head's columns
/// of a packed q|k|v row, say).
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace zt::cpu
