// Newton-Schulz orthogonalisation: Muon's zeroth power of a matrix (Keller Jordan's quintic
// iteration, as DeepSpeed's and torch's Muon run it), on the backend's own memory. Its GEMMs are
// KernelOps<float> matmuls (sgemm or oneDNN on the CPU, cuBLASLt on a GPU, rounded to bf16
// where the run's fp32 matmuls are) and its element-wise steps OptimizerOps', all on the
// compute stream: nothing waits on the host.
//
// For a rows x cols matrix G, with X = G or its transpose so that X is m x n with m <= n:
//   X = X / (||X||_F + 1e-7)
//   standard, 5 times:  A = X X^T ; B = b A + c A A ; X = a X + B X      (a, b, c) = (3.4445, -4.7750, 2.0315)
//   gram (DeepSpeed's default; Dao's Gram Newton-Schulz): the same polynomial carried on the
//     m x m matrices R = X X^T and Q instead of X, restarted from X = Q X at iteration 2, and
//     X = Q X at the end; standard for square matrices, where it saves nothing.
// and the result scaled by sqrt(max(1, rows / cols)) of the stored shape, as DeepSpeed's
// muon_update. A transpose is never materialised: for rows > cols the iteration runs on G from
// the right (A = G^T G, G = a G + G B), which is the same arithmetic transposed.
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"

namespace zt {

class NewtonSchulz {
 public:
  /// Workspace for matrices up to max_elements elements whose shorter side is at most max_side.
  NewtonSchulz(Backend& backend, OptimizerConfig::NsMethod method, int steps, size_t max_elements, size_t max_side);

  /// fp32 elements of workspace the constructor allocates (zero_estimate counts them).
  static size_t workspace_elements(size_t max_elements, size_t max_side);
  /// Multiply-adds of orthogonalising one rows x cols matrix: what balancing the matrices over
  /// the ranks weighs them by.
  static double cost(OptimizerConfig::NsMethod method, int steps, size_t rows, size_t cols);

  /// Replaces x (rows x cols, row-major fp32 on the device) with its orthogonalisation, scaled.
  /// Enqueued on the compute stream.
  void orthogonalize(float* x, size_t rows, size_t cols);
  /// Device bytes of the workspace.
  size_t bytes() const { return work_.bytes() + norm_.bytes(); }

 private:
  void standard(float* x, size_t rows, size_t cols);
  void gram(float* x, size_t rows, size_t cols);
  /// out = X X^T (m x m) for the m x n orientation of x: a linear_forward, or G^T G for rows > cols.
  void gram_matrix(float* out, const float* x, size_t rows, size_t cols);
  /// out = the m x m matrix s applied to x on x's short side: s X (rows <= cols) or X s^T = X s.
  void apply_left(float* out, const float* s, const float* x, size_t rows, size_t cols);
  /// out = p q for m x m matrices where q is symmetric (every product here: polynomials of one R).
  void square_product(float* out, const float* p, const float* q, size_t m);

  Backend& backend_;
  Stream& stream_;
  KernelOps<float>& gemm_;
  OptimizerOps& ops_;
  const OptimizerConfig::NsMethod method_;
  const int steps_;
  DeviceArray<float> work_;
  DeviceArray<double> norm_;
  size_t max_elements_, max_side_;
};

}  // namespace zt
