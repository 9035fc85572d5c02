// Batch-invariant GEMMs (invariant_gemm.h). Every element's arithmetic is the same sequence of
// intrinsics whichever register block it falls in (full or edge, any rows x columns), and one
// thread computes it whole, so its bits depend only on its own row of x and the weights. Only
// intrinsics add and multiply here: GCC contracts a plain `a * b + c` into an FMA where it likes
// (-ffp-contract=fast), which could differ between two copies of a loop.
#include "backend/cpu/invariant_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>

namespace zt::cpu {
namespace {

// Lanes [0, n) set: maskload reads zeros elsewhere, so a tail step adds fma(0, 0, acc) = acc.
__m256i tail_mask(int n) {
  alignas(32) static const int kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - n));
}

// The lanes' sum in one fixed tree: (0+4, 1+5, 2+6, 3+7), then (a+c, b+d), then the two.
float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// value + bias (an intrinsic, as every add here).
float plus_bias(float value, const float* bias, size_t n) {
  return bias ? _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(value), _mm_set_ss(bias[n]))) : value;
}

constexpr int kNtRows = 4, kNtColumns = 3;   // an nt block: 12 accumulators, 7 loads a step of 8
constexpr int kNtChunk = 64;                 // rows of x that pass the weights together
constexpr int kNnRows = 4, kNnColumns = 16;  // an nn block: 8 accumulators, 2 loads a step of 1
constexpr int kNnDepth = 256;                // k a pass: the block's 16 KiB of w stay in L1

struct Operands {
  float* out;
  const float *x, *w, *bias;
  int N, K;
};

// MR rows of x from m0 against NR rows of w from n0 (out[m0.., n0..]).
template <int MR, int NR>
void nt_block(const Operands& p, int m0, int n0) {
  const size_t K = size_t(p.K);
  __m256 acc[MR][NR];
  const float* xr[MR];
  const float* wr[NR];
  for (int i = 0; i < MR; ++i) xr[i] = p.x + size_t(m0 + i) * K;
  for (int j = 0; j < NR; ++j) wr[j] = p.w + size_t(n0 + j) * K;
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= p.K; k += 8) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(wr[j] + k);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(xr[i] + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < p.K) {
    const __m256i mask = tail_mask(p.K - k);
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(wr[j] + k, mask);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_maskload_ps(xr[i] + k, mask);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  const size_t N = size_t(p.N);
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const size_t m = size_t(m0 + i), n = size_t(n0 + j);
      p.out[m * N + n] = plus_bias(lane_sum(acc[i][j]), p.bias, n);
    }
  }
}

template <int MR>
void nt_rows(const Operands& p, int m0, int n0, int columns) {
  switch (columns) {
    case 3: return nt_block<MR, 3>(p, m0, n0);
    case 2: return nt_block<MR, 2>(p, m0, n0);
    default: return nt_block<MR, 1>(p, m0, n0);
  }
}

// MR rows of x from m0 against NV vectors of 8 columns of w from column n0 (row k of those
// columns at strip + (k - k0) * ld), over k in [k0, k1): the running sums come from out (k0 > 0)
// and go back to it, which rounds nothing, so each element is still one FMA chain over k in
// order. The last k block adds the bias. `last` masks the final vector's columns past N
// (nothing stored there); Whole: the strip's rows may be read whole (its lanes past N are
// never stored), else those lanes are read as zeros.
template <int MR, int NV, bool Whole>
void nn_block(const Operands& p, const float* strip, size_t ld, int m0, int n0, int k0, int k1, __m256i last) {
  const size_t N = size_t(p.N), K = size_t(p.K);
  __m256i mask[NV];
  for (int j = 0; j < NV; ++j) mask[j] = j + 1 < NV ? _mm256_set1_epi32(-1) : last;
  __m256 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    const float* o = p.out + size_t(m0 + i) * N + size_t(n0);
    for (int j = 0; j < NV; ++j) acc[i][j] = k0 == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(o + 8 * j, mask[j]);
  }
  for (size_t k = size_t(k0); k < size_t(k1); ++k) {
    const float* wk = strip + (k - size_t(k0)) * ld;
    __m256 wv[NV];
    for (int j = 0; j < NV; ++j) wv[j] = Whole ? _mm256_loadu_ps(wk + 8 * j) : _mm256_maskload_ps(wk + 8 * j, mask[j]);
    for (int i = 0; i < MR; ++i) {
      const __m256 xb = _mm256_broadcast_ss(p.x + size_t(m0 + i) * K + k);
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(xb, wv[j], acc[i][j]);
    }
  }
  const bool finished = k1 == p.K;
  for (int i = 0; i < MR; ++i) {
    const size_t row = size_t(m0 + i) * N + size_t(n0);
    for (int j = 0; j < NV; ++j) {
      __m256 v = acc[i][j];
      if (finished && p.bias) v = _mm256_add_ps(v, _mm256_maskload_ps(p.bias + n0 + 8 * j, mask[j]));
      _mm256_maskstore_ps(p.out + row + size_t(8 * j), mask[j], v);
    }
  }
}

// `packed`: the strip is a copy of kNnColumns floats a row, readable whole.
template <int MR>
void nn_rows(const Operands& p, const float* strip, size_t ld, bool packed, int m0, int n0, int k0, int k1) {
  const int columns = std::min(kNnColumns, p.N - n0);
  const __m256i last = tail_mask(columns > 8 ? columns - 8 : columns);
  if (columns > 8) {
    if (packed || columns == kNnColumns) return nn_block<MR, 2, true>(p, strip, ld, m0, n0, k0, k1, last);
    return nn_block<MR, 2, false>(p, strip, ld, m0, n0, k0, k1, last);
  }
  if (packed) return nn_block<MR, 1, true>(p, strip, ld, m0, n0, k0, k1, last);
  nn_block<MR, 1, false>(p, strip, ld, m0, n0, k0, k1, last);
}

}  // namespace

void invariant_gemm_nt(float* out, const float* x, const float* w, const float* bias, int M, int N, int K) {
  const Operands p{out, x, w, bias, N, K};
  const int column_blocks = (N + kNtColumns - 1) / kNtColumns, row_chunks = (M + kNtChunk - 1) / kNtChunk;
  // A chunk of x's rows (in L2) passes every block of weight rows (in L1) before the next chunk.
#pragma omp parallel for collapse(2) schedule(static)
  for (int rc = 0; rc < row_chunks; ++rc) {
    for (int cb = 0; cb < column_blocks; ++cb) {
      const int n0 = cb * kNtColumns, columns = std::min(kNtColumns, N - n0);
      for (int m0 = rc * kNtChunk; m0 < std::min(M, (rc + 1) * kNtChunk); m0 += kNtRows) {
        switch (std::min(kNtRows, M - m0)) {
          case 4: nt_rows<4>(p, m0, n0, columns); break;
          case 3: nt_rows<3>(p, m0, n0, columns); break;
          case 2: nt_rows<2>(p, m0, n0, columns); break;
          default: nt_rows<1>(p, m0, n0, columns); break;
        }
      }
    }
  }
}

void invariant_gemm_nn(float* out, const float* x, const float* w, const float* bias, int M, int N, int K) {
  const Operands p{out, x, w, bias, N, K};
  const int column_blocks = (N + kNnColumns - 1) / kNnColumns, row_blocks = (M + kNnRows - 1) / kNnRows;
  const bool pack = row_blocks > 1;
  // A thread owns a strip of columns through every k block, so no element changes threads. In
  // place, a strip's rows lie N floats apart, a multiple of 4 KiB for GPT-2's widths, so they
  // share a few L1 sets and evict each other; where several row blocks pass a k block, it is
  // copied to contiguous rows first (16 KiB, in L1; a copy changes no sum).
#pragma omp parallel
  {
    alignas(64) float packed[kNnDepth * kNnColumns] = {};
#pragma omp for schedule(static)
    for (int cb = 0; cb < column_blocks; ++cb) {
      const int n0 = cb * kNnColumns, columns = std::min(kNnColumns, N - n0);
      for (int k0 = 0; k0 < std::max(K, 1); k0 += kNnDepth) {
        const int k1 = std::min(K, k0 + kNnDepth);
        const float* strip = w + size_t(k0) * size_t(N) + size_t(n0);  // row k0 of the strip
        size_t ld = size_t(N);
        if (pack) {
          for (int k = 0; k < k1 - k0; ++k) std::copy_n(strip + size_t(k) * ld, columns, packed + k * kNnColumns);
          strip = packed, ld = kNnColumns;
        }
        for (int rb = 0; rb < row_blocks; ++rb) {
          const int m0 = rb * kNnRows;
          switch (std::min(kNnRows, M - m0)) {
            case 4: nn_rows<4>(p, strip, ld, pack, m0, n0, k0, k1); break;
            case 3: nn_rows<3>(p, strip, ld, pack, m0, n0, k0, k1); break;
            case 2: nn_rows<2>(p, strip, ld, pack, m0, n0, k0, k1); break;
            default: nn_rows<1>(p, strip, ld, pack, m0, n0, k0, k1); break;
          }
        }
      }
    }
  }
}

}  // namespace zt::cpu
