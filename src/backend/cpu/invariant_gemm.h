// Matrix products whose every output element is summed in one fixed order, whatever the number
// of rows, the row's place among them or the thread count: batch-invariant GEMMs. A library's
// sgemm picks its kernels and blocking by the shape (OpenBLAS 0.3.21 rounds a row of a 16-row
// product differently from the same row alone), so a sequence decoded beside others would get
// other logits than alone. The decoder's products run here when KernelOps::set_batch_invariant
// is on. AVX2 and FMA only, so the AVX2 and AVX-512 kernel tables give the same bits.
#pragma once

namespace zt::cpu {

/// out[m,n] = (sum_k x[m,k] * w[n,k]) + bias[n], row-major, w as nn.Linear holds it ([N,K]).
/// Each dot product: 8 lanes, lane j summing k = j, j+8, ... by FMA in order, then the lanes in a
/// fixed tree. bias may be null. out may not overlap x or w.
void invariant_gemm_nt(float* out, const float* x, const float* w, const float* bias, int M, int N, int K);

/// out[m,n] = (sum_k x[m,k] * w[k,n]) + bias[n], w as GPT-2's Conv1D holds it ([K,N]). Each
/// element: one FMA chain over k = 0, 1, ... in order.
void invariant_gemm_nn(float* out, const float* x, const float* w, const float* bias, int M, int N, int K);

}  // namespace zt::cpu
