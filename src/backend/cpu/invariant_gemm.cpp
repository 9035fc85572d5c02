// Batch-invariant GEMMs (invariant_gemm.h). Every element's arithmetic is the same sequence of
// intrinsics whichever register block it falls in (full or edge, any rows x columns), and one
// thread computes it whole, so its bits depend only on its own row of x and the weights. Only
// intrinsics add and multiply here: GCC contracts a plain `a * b + c` into an FMA where it likes
// (-ffp-contract=fast), which could differ between two copies of a loop.
#include "backend/cpu/invariant_gemm.h"

#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

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

// A k block [k0, k1) of a strip of w's columns, row k at strip + (k - k0) * ld (in place, or
// copied to contiguous rows).
struct NnTile {
  const float* strip;
  size_t ld;
  int k0, k1;
};

// MR rows of x from m0 against NV vectors of 8 columns of w from column n0, over the tile's k:
// the running sums come from out (k0 > 0) and go back to it, which rounds nothing, so each
// element is one FMA chain over k in order, whatever the block's shape. The last k block adds
// the bias. Full: every vector's 8 columns lie inside N; else the last vector's first
// `last_lanes` do, and its other lanes are read as zeros and never stored. Full blocks use no
// mask, and the small loops are unrolled by pragma: a mask live across the k loop, or loops
// GCC unrolled too late, kept the 6 x 2 accumulators on the stack (2.4x slower).
template <int MR, int NV, bool Full>
void nn_block(const Operands& p, const NnTile& t, int m0, int n0, int last_lanes) {
  const size_t N = size_t(p.N), K = size_t(p.K);
  const __m256i last = tail_mask(Full ? 8 : last_lanes);
  const auto load = [&](const float* from, int j) {
    return Full || j + 1 < NV ? _mm256_loadu_ps(from) : _mm256_maskload_ps(from, last);
  };
  __m256 acc[MR][NV];
  _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {
    const float* o = p.out + size_t(m0 + i) * N + size_t(n0);
    _Pragma("GCC unroll 16") for (int j = 0; j < NV; ++j) {
      acc[i][j] = t.k0 == 0 ? _mm256_setzero_ps() : load(o + 8 * j, j);
    }
  }
  const float* xr[MR];  // x[m0 + i, k0 + k] at xr[i] + k
  _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) xr[i] = p.x + size_t(m0 + i) * K + size_t(t.k0);
  const size_t depth = size_t(t.k1 - t.k0), ld = t.ld;
  const float* wk = t.strip;
  for (size_t k = 0; k < depth; ++k, wk += ld) {
    __m256 wv[NV];
    _Pragma("GCC unroll 16") for (int j = 0; j < NV; ++j) wv[j] = load(wk + 8 * j, j);
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {
      const __m256 xb = _mm256_broadcast_ss(xr[i] + k);
      _Pragma("GCC unroll 16") for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(xb, wv[j], acc[i][j]);
    }
  }
  const bool finished = t.k1 == p.K;
  _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {
    float* o = p.out + size_t(m0 + i) * N + size_t(n0);
    _Pragma("GCC unroll 16") for (int j = 0; j < NV; ++j) {
      __m256 v = acc[i][j];
      if (finished && p.bias) v = _mm256_add_ps(v, load(p.bias + n0 + 8 * j, j));
      if (Full || j + 1 < NV) {
        _mm256_storeu_ps(o + 8 * j, v);
      } else {
        _mm256_maskstore_ps(o + 8 * j, last, v);
      }
    }
  }
}

// Register blocks: MR rows x NV vectors, MR * NV <= 12 accumulators (of 16 ymm registers; the
// rest hold a step's weight vectors and a broadcast). Six rows by two vectors is the usual
// AVX2 shape (2 loads and 6 broadcasts a step of 12 FMAs). Fewer rows than 6 (decoding a few
// sequences) take wider strips, up to 96 columns at 1 row, so a step reads a row of w's
// several cache lines in a row: 0.3x OpenBLAS's time at 1 and 4 rows, against 0.9x and 0.4x
// with 16-column strips.
constexpr int kNnMaxRows = 6, kNnAccumulators = 12, kNnPackedColumns = 16;
constexpr int kNnDepth = 256;  // k a pass: a copied strip's 16 KiB stays in L1
constexpr int kNnChunk = 96;   // rows of x a pass over a strip: 96 KiB a k block, in L2
constexpr int kNnGroup = 16;   // strips copied at a time: 256 KiB a k block, in L2
// Floats from one copied strip to the next: 16 KiB and a cache line. Exactly 16 KiB apart, a
// row's 16 stores (one a strip) all fell in one L1 set, of 8 ways, and evicted each other.
constexpr size_t kNnCopyStride = size_t(kNnDepth) * kNnPackedColumns + 16;

// Rows [0, depth) of `strips` 16-column strips side by side (`columns` of them inside N), row k
// at from + k * ld, to one block of rows of 16 for each strip. Row by row across the strips:
// each row of w is read as one run of 16 * strips floats, which the hardware prefetcher follows
// from memory; a strip at a time, 256 lines 12 KiB apart, page to page, each waited for.
void pack_strips(float* to, const float* from, size_t ld, int depth, int strips, int columns) {
  for (int k = 0; k < depth; ++k, from += ld) {
    for (int s = 0; s < strips; ++s) {
      const float* row = from + size_t(s) * kNnPackedColumns;
      float* copy = to + size_t(s) * kNnCopyStride + size_t(k) * kNnPackedColumns;
      const int n = std::min(kNnPackedColumns, columns - s * kNnPackedColumns);
      if (n == kNnPackedColumns) {  // two vector copies: std::copy_n's call a 64-byte row costs more
        _mm256_storeu_ps(copy, _mm256_loadu_ps(row));
        _mm256_storeu_ps(copy + 8, _mm256_loadu_ps(row + 8));
      } else {
        std::copy_n(row, n, copy);
      }
    }
  }
}

// The running sums of rows [m0, m1), columns n0.. of out, which a kernel reads first: from k's
// second block on they come from L3 or memory, and 12 misses at a kernel's start stall it.
void prefetch_sums(const float* out, int N, int m0, int m1, int n0) {
  for (int m = m0; m < m1; ++m) {
    const char* row = reinterpret_cast<const char*>(out + size_t(m) * size_t(N) + size_t(n0));
    _mm_prefetch(row, _MM_HINT_T0);
    _mm_prefetch(row + 63, _MM_HINT_T0);
  }
}

using NnKernel = void (*)(const Operands&, const NnTile&, int, int, int);

template <int MR, int NV>
NnKernel nn_kernel(bool full) {
  return full ? &nn_block<MR, NV, true> : &nn_block<MR, NV, false>;
}

template <int MR, int... NV>
NnKernel nn_kernel(int vectors, bool full, std::integer_sequence<int, NV...>) {
  NnKernel k = nullptr;
  ((vectors == NV + 1 ? (k = nn_kernel<MR, NV + 1>(full), 0) : 0), ...);
  return k;
}

// The kernel for `rows` (1..6) rows and `vectors` (1..12 / rows) vectors of columns.
NnKernel nn_kernel(int rows, int vectors, bool full) {
  switch (rows) {
    case 1: return nn_kernel<1>(vectors, full, std::make_integer_sequence<int, 12>{});
    case 2: return nn_kernel<2>(vectors, full, std::make_integer_sequence<int, 6>{});
    case 3: return nn_kernel<3>(vectors, full, std::make_integer_sequence<int, 4>{});
    case 4: return nn_kernel<4>(vectors, full, std::make_integer_sequence<int, 3>{});
    case 5: return nn_kernel<5>(vectors, full, std::make_integer_sequence<int, 2>{});
    default: return nn_kernel<6>(vectors, full, std::make_integer_sequence<int, 2>{});
  }
}

// Rows [r0, r1) of x against the strips [s0, s1) of `strip_columns` columns, over one k block.
// strips: a copy of those strips' k block, or null (then read in place).
void nn_pass(const Operands& p, const float* strips, int strip_columns, int s0, int s1, int r0, int r1, int k0,
             int k1) {
  for (int s = s0; s < s1; ++s) {
    const int n0 = s * strip_columns, columns = std::min(strip_columns, p.N - n0);
    const int vectors = (columns + 7) / 8, last_lanes = columns - 8 * (vectors - 1);
    NnTile tile{p.w + size_t(k0) * size_t(p.N) + size_t(n0), size_t(p.N), k0, k1};
    if (strips) tile.strip = strips + size_t(s - s0) * kNnCopyStride, tile.ld = kNnPackedColumns;
    const int block_rows = std::min(kNnMaxRows, r1 - r0);  // every block's but the last's
    const NnKernel whole_block = nn_kernel(block_rows, vectors, columns % 8 == 0);
    for (int m0 = r0; m0 < r1; m0 += kNnMaxRows) {
      const int rows = std::min(kNnMaxRows, r1 - m0);
      if (k0 > 0) prefetch_sums(p.out, p.N, m0 + kNnMaxRows, std::min(r1, m0 + 2 * kNnMaxRows), n0);
      const NnKernel kernel = rows == block_rows ? whole_block : nn_kernel(rows, vectors, columns % 8 == 0);
      kernel(p, tile, m0, n0, last_lanes);
    }
  }
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
  if (M <= 0 || N <= 0) return;
  const Operands p{out, x, w, bias, N, K};
  const int block_rows = std::min(M, kNnMaxRows);
  const int strip_columns = 8 * (kNnAccumulators / block_rows), strips = (N + strip_columns - 1) / strip_columns;
  // Where more than one row block passes each strip (then 16 columns), a group of strips' k
  // block is copied to contiguous rows first (a copy changes no sum): in place a strip's rows
  // lie N floats apart, a multiple of 4 KiB for GPT-2's widths, and evict each other from L1's
  // few sets. Then each chunk of x's rows (in L2) passes each copied strip (in L1), as in
  // GotoBLAS's loops. Copying x too (a block's 6 rows interleaved) measured no faster here.
  const bool pack = M > kNnMaxRows;
  // Each thread owns whole strips of columns through every k block, so no element changes
  // threads and no thread waits for another.
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int first = int(int64_t(strips) * t / threads), end = int(int64_t(strips) * (t + 1) / threads);
    // Uninitialised: every float a kernel reads is copied there first (a vector would zero its
    // 257 KiB on every call and thread).
    const std::unique_ptr<float[]> copied(pack ? new float[size_t(kNnGroup) * kNnCopyStride] : nullptr);
    for (int k0 = 0; k0 < std::max(K, 1); k0 += kNnDepth) {
      const int k1 = std::min(K, k0 + kNnDepth);
      for (int g0 = first; g0 < end; g0 += kNnGroup) {
        const int g1 = std::min(end, g0 + kNnGroup);
        if (pack) {
          pack_strips(copied.get(), w + size_t(k0) * size_t(N) + size_t(g0) * kNnPackedColumns, size_t(N), k1 - k0,
                      g1 - g0, std::min(N, g1 * kNnPackedColumns) - g0 * kNnPackedColumns);
        }
        for (int r0 = 0; r0 < M; r0 += kNnChunk) {
          nn_pass(p, copied.get(), strip_columns, g0, g1, r0, std::min(M, r0 + kNnChunk), k0, k1);
        }
      }
    }
  }
}

}  // namespace zt::cpu
