// Flash attention (FlashAttention-2's scheme) for the CUDA bf16 table: causal, grouped-query,
// head sizes 64 and 128, any T. bf16 operands on tensor cores (mma.sync m16n8k16, fp32
// accumulation), the softmax in fp32, and O(T) memory: the forward saves lse, the natural-log
// logsumexp of each query row's scaled scores, and the backward recomputes P = exp(s - lse).
//
// Every kernel is 4 warps, each owning 16 rows of its block's tile, so a warp's score tile,
// softmax and output accumulators stay in its registers: the mma accumulator layout (thread
// lane owns rows lane/4 and lane/4 + 8, columns 2 (lane%4) and + 1 of each 8-column tile) is
// turned into the next mma's A operand without going through shared memory. Tiles are in shared
// memory as bf16 rows of hs, their 16-byte chunks XOR-swizzled by row (chunk c of row r at
// c ^ (r % 8)), so that ldmatrix's eight row reads and cp.async's writes hit distinct banks. K/V
// (forward, dQ) or Q/dO (dK/dV) are double-buffered: cp.async fetches the next tile while the
// mmas run on this one.
//
// - forward: a block per (64-query tile, b, h), looping over the 64-key tiles up to the tile's
//   last position (fully masked tiles are never visited; the mask is applied only on tiles that
//   cross the diagonal or the end of the keys). Online softmax in base 2 (scale folded into
//   log2(e) scale), O and lse written once. Query tiles are launched heaviest (latest) first.
// - backward: three kernels, none with atomics, so results repeat bit for bit.
//   1. D_i = dO_i . O_i, which the softmax backward needs (dS = P (dP - D)), from the forward's
//      bf16 output as FlashAttention-2 and PyTorch's SDPA take it: one read of dO and O, 16 bytes
//      a thread. (Recomputing O in fp32 instead, as this file first did, cost a whole forward:
//      about a fifth of the backward's time, measured on an H100, for a D less perturbed by O's
//      rounding than the bf16 gradients that follow.)
//   2. dQ: a block per (64-query tile, b, h) over the key tiles (32 keys a step at hs 128, 64 at
//      hs 64): S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K; dQ scaled and rounded once.
//   3. dK, dV: a block per (64-key tile, b, kv head) over the query heads of the group, then the
//      query tiles from the diagonal on (32 queries a step at hs 128, 64 at hs 64, to keep dK, dV
//      and the score tiles in registers): S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
//      dK += dS^T Q. GQA sums over the group inside the block, in head order: no K/V copies.
// Rows past Tq or Tk are zero-filled on load (cp.async with source size 0, never garbage that
// could be NaN), masked to probability 0, and never stored.
#include "backend/cuda/cuda_flash_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel_utils.cuh"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;
constexpr int kRowsPerWarp = 16;  // the mma's M
constexpr int kQueryTile = kFlashWarps * kRowsPerWarp;  // 64: forward and dQ rows, dK/dV keys
constexpr int kKeyTile = 64;                            // forward columns (keys a step)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// The query rows of one dK/dV step, and the keys of one dQ step: 32 at hs 128 keeps the
/// accumulators (dK and dV: 128 fp32 a thread; dQ: 64) and the two score tiles (S, dP) within the
/// register file without spills; 64 at hs 64.
template <int HS>
constexpr int dkdv_query_tile() {
  return HS == 128 ? 32 : 64;
}
template <int HS>
constexpr int dq_key_tile() {
  return HS == 128 ? 32 : 64;
}

// ---- PTX: cp.async, ldmatrix, mma --------------------------------------------------------------

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared, bypassing L1; valid = false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
/// 4 bytes (one float) global -> shared; valid = false writes 0.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// d[16x8] += a[16x16] b[16x8]: bf16 in, fp32 accumulate (HMMA.16816.F32.BF16).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats rounded to nearest even into two bf16 (lo in the low half): an mma operand word.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// ---- swizzled tiles and warp-level GEMMs --------------------------------------------------------
// A tile is rows x HS bf16 in shared memory, row r's 16-byte chunk c at chunk c ^ (r % 8) of the
// row (HS / 8 >= 8 chunks a row, so the XOR stays in the row). Addresses are byte offsets in the
// shared window (what ldmatrix and cp.async take).

template <int HS>
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return uint32_t(row * HS + ((chunk ^ (row & 7)) << 3)) * 2u;
}

/// Rows row0 .. row0 + ROWS - 1 of one head (row r at base + r stride) into a tile, by cp.async;
/// rows at or past `rows` are zero-filled. All threads of the block take part.
template <int ROWS, int HS>
__device__ __forceinline__ void load_tile(uint32_t tile, const bf16* base, size_t stride, int row0, int rows) {
  constexpr int kChunks = HS / 8;
  static_assert(ROWS * kChunks % kFlashThreads == 0);
#pragma unroll
  for (int it = 0; it < ROWS * kChunks / kFlashThreads; ++it) {
    const int i = it * kFlashThreads + int(threadIdx.x), r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < rows;
    const bf16* src = valid ? base + size_t(row0 + r) * stride + c * 8 : base;
    cp_async16(tile + tile_offset<HS>(r, c), src, valid);
  }
}

/// The A operand (16x16, row-major) of rows row0.. and columns 16 ks.. of a tile.
template <int HS>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t tile, int row0, int ks) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4(a, tile + tile_offset<HS>(row0 + (lane & 15), ks * 2 + (lane >> 4)));
}

/// B operands of two n8 blocks where the tile's rows n0..n0+15 are n and its columns 16 ks.. are
/// k (K in S = Q K^T): b[0], b[1] for n0.., b[2], b[3] for n0 + 8...
template <int HS>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], uint32_t tile, int n0, int ks) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4(b, tile + tile_offset<HS>(n0 + ((lane >> 4) << 3) + (lane & 7), ks * 2 + ((lane >> 3) & 1)));
}

/// B operands of two n8 blocks where the tile's rows k0..k0+15 are k and its chunks nc, nc + 1
/// are n (V in O = P V): transposed on the way out of shared memory.
template <int HS>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], uint32_t tile, int k0, int nc) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4_trans(b, tile + tile_offset<HS>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), nc + (lane >> 4)));
}

/// acc[16 x N] += A B^T with A the warp's 16 rows (a_row0..) of tile a and B the N rows of tile b,
/// both HS wide: S = Q K^T, dP = dO V^T, and their transposes in dK/dV.
template <int HS, int N>
__device__ __forceinline__ void warp_gemm_abt(float (&acc)[N / 8][4], uint32_t a_tile, int a_row0,
                                              uint32_t b_tile) {
#pragma unroll
  for (int ks = 0; ks < HS / 16; ++ks) {
    uint32_t a[4];
    load_a<HS>(a, a_tile, a_row0, ks);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4];
      load_b<HS>(b, b_tile, np * 16, ks);
      mma_bf16(acc[2 * np], a, b[0], b[1]);
      mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

/// acc[16 x HS] += P B with P[16 x K] an accumulator-layout tile in registers (rounded to bf16
/// here) and B the first K rows of tile b: O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q.
template <int HS, int K>
__device__ __forceinline__ void warp_gemm_pb(float (&acc)[HS / 8][4], const float (&p)[K / 8][4], uint32_t b_tile) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    // The accumulators of columns 16 ks.. are exactly the A operand's layout for k = 16 ks..
    const uint32_t a[4] = {pack_bf16x2(p[2 * ks][0], p[2 * ks][1]), pack_bf16x2(p[2 * ks][2], p[2 * ks][3]),
                           pack_bf16x2(p[2 * ks + 1][0], p[2 * ks + 1][1]),
                           pack_bf16x2(p[2 * ks + 1][2], p[2 * ks + 1][3])};
#pragma unroll
    for (int nd = 0; nd < HS / 16; ++nd) {
      uint32_t b[4];
      load_b_trans<HS>(b, b_tile, ks * 16, nd * 2);
      mma_bf16(acc[2 * nd], a, b[0], b[1]);
      mma_bf16(acc[2 * nd + 1], a, b[2], b[3]);
    }
  }
}

/// The warp's 16 rows of acc[16 x HS], times mul[r] for its row r (lane/4 + 8 r), rounded to bf16
/// into its own rows (row0..) of a tile that no other warp reads, then 16 bytes a lane to the
/// global rows grow0.. below `rows` (row i at base + i stride).
template <int HS>
__device__ __forceinline__ void store_warp_rows(const float (&acc)[HS / 8][4], const float (&mul)[2],
                                                unsigned char* smem, uint32_t tile, int row0, bf16* base,
                                                size_t stride, int grow0, int rows) {
  const int lane = threadIdx.x % kWarp;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + lane / 4 + 8 * r;
      *reinterpret_cast<uint32_t*>(smem + tile + tile_offset<HS>(row, n) + (lane % 4) * 4) =
          pack_bf16x2(acc[n][2 * r] * mul[r], acc[n][2 * r + 1] * mul[r]);
    }
  __syncwarp();
  constexpr int kChunks = HS / 8;
#pragma unroll
  for (int it = 0; it < kRowsPerWarp * kChunks / kWarp; ++it) {
    const int i = it * kWarp + lane, r = i / kChunks, c = i % kChunks;
    if (grow0 + r < rows)
      *reinterpret_cast<uint4*>(base + size_t(grow0 + r) * stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem + tile + tile_offset<HS>(row0 + r, c));
  }
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/// What every kernel gets (one struct, passed by value: a kernel argument).
struct FlashParams {
  AttentionLayout l;
  const bf16 *q, *k, *v, *dout;
  bf16 *out, *dq, *dk, *dv;
  float* lse;            // forward: written
  const float* lse_in;   // backward: the forward's
  const bf16* out_in;    // backward: the forward's output
  float* rowdot;         // backward pass 1: D written
  const float* rowdot_in;
  float scale, scale_log2;  // 1/sqrt(hs), and times log2(e)
};

/// Head bases of block (b, h): q, dq, dout, out rows and the k, v rows of h's kv head.
struct HeadBase {
  size_t q, o, kv;
  __device__ HeadBase(const AttentionLayout& l, int b, int h)
      : q(size_t(b) * l.Tq * l.q_token + size_t(h) * l.hs),
        o(size_t(b) * l.Tq * l.o_token + size_t(h) * l.hs),
        kv(size_t(b) * l.Tk * l.kv_token + size_t(h / (l.NH / l.NKV)) * l.hs) {}
};

// ---- forward ------------------------------------------------------------------------------------

/// out and lse.
template <int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(const FlashParams p) {
  constexpr int kBr = kQueryTile, kBc = kKeyTile;
  constexpr uint32_t kQBytes = kBr * HS * 2, kKVBytes = kBc * HS * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const AttentionLayout& l = p.l;
  const int heads = l.B * l.NH, q_tiles = (l.Tq + kBr - 1) / kBr;
  const int qt = q_tiles - 1 - int(blockIdx.x / unsigned(heads)), bh = int(blockIdx.x % unsigned(heads));
  const int b = bh / l.NH, h = bh % l.NH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int q0 = qt * kBr, offset = l.Tk - l.Tq;
  const HeadBase base(l, b, h);
  const bf16 *qh = p.q + base.q, *kh = p.k + base.kv, *vh = p.v + base.kv;
  const uint32_t s0 = shared_address(smem);
  const uint32_t s_q = 0, s_k = kQBytes, s_v = kQBytes + 2 * kKVBytes;  // offsets; K and V double-buffered
  // The tile's last query sees keys up to its position: later key tiles are never visited.
  const int k_tiles = (offset + min(q0 + kBr, l.Tq) - 1) / kBc + 1;

  load_tile<kBr, HS>(s0 + s_q, qh, l.q_token, q0, l.Tq);
  load_tile<kBc, HS>(s0 + s_k, kh, l.kv_token, 0, l.Tk);
  load_tile<kBc, HS>(s0 + s_v, vh, l.kv_token, 0, l.Tk);
  cp_async_commit();

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};  // base-2 running max; this thread's partial sums
  const int row_a = q0 + warp * kRowsPerWarp + lane / 4;           // this thread's rows: row_a, row_a + 8
  for (int kt = 0; kt < k_tiles; ++kt) {
    const uint32_t buf = (kt & 1) * kKVBytes;
    if (kt + 1 < k_tiles) {
      const uint32_t next = kKVBytes - buf;
      load_tile<kBc, HS>(s0 + s_k + next, kh, l.kv_token, (kt + 1) * kBc, l.Tk);
      load_tile<kBc, HS>(s0 + s_v + next, vh, l.kv_token, (kt + 1) * kBc, l.Tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    float s[kBc / 8][4] = {};
    warp_gemm_abt<HS, kBc>(s, s0 + s_q, warp * kRowsPerWarp, s0 + s_k + buf);
    const int k0 = kt * kBc;
    // Only tiles that cross the diagonal (or the end of the keys) need the mask.
    const bool masked = k0 + kBc - 1 > q0 + offset || k0 + kBc > l.Tk;
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float x = s[n][j] * p.scale_log2;
        if (masked) {
          const int key = k0 + n * 8 + 2 * (lane % 4) + (j & 1), row = row_a + 8 * (j >> 1);
          if (key > row + offset || key >= l.Tk) x = -INFINITY;
        }
        s[n][j] = x;
        row_max[j >> 1] = fmaxf(row_max[j >> 1], x);
      }
    float ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(row_max[r]));
      ref[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet: no inf - inf
      const float alpha = exp2f(m[r] - ref[r]);
      m[r] = m_new;
      sum[r] *= alpha;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float e = exp2f(s[n][j] - ref[j >> 1]);
        s[n][j] = e;
        sum[j >> 1] += e;
      }
    warp_gemm_pb<HS, kBc>(o, s, s0 + s_v + buf);
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] = quad_sum(sum[r]);
    inv[r] = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;
  }
  store_warp_rows<HS>(o, inv, smem, s_q, warp * kRowsPerWarp, p.out + base.o, l.o_token, q0 + warp * kRowsPerWarp,
                      l.Tq);
  if (lane % 4 == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (row_a + 8 * r < l.Tq) p.lse[size_t(bh) * l.Tq + row_a + 8 * r] = (m[r] + log2f(sum[r])) * kLn2;
}

// ---- backward pass 1: D -------------------------------------------------------------------------

/// rowdot[(b NH + h) Tq + i] = dO_i . O_i over the head's HS values, in fp32: HS / 8 threads a
/// row, 8 bf16 (16 bytes) of each, summed across them with shuffles in a fixed order.
template <int HS>
__global__ void __launch_bounds__(256) flash_rowdot_kernel(const FlashParams p) {
  constexpr int kLanes = HS / 8;  // 8 or 16: rows never straddle a warp
  const AttentionLayout& l = p.l;
  const size_t rows = size_t(l.B) * l.NH * l.Tq;
  const size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t r = thread / kLanes;
  const int part = int(thread % kLanes);
  float dot = 0;
  if (r < rows) {
    const int i = int(r % l.Tq), h = int(r / l.Tq % l.NH), b = int(r / l.Tq / l.NH);
    const size_t at = (size_t(b) * l.Tq + i) * l.o_token + size_t(h) * l.hs + size_t(part) * 8;
    const uint4 d = *reinterpret_cast<const uint4*>(p.dout + at);
    const uint4 o = *reinterpret_cast<const uint4*>(p.out_in + at);
    const uint32_t dw[4] = {d.x, d.y, d.z, d.w}, ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) dot += bf16_lo(dw[w]) * bf16_lo(ow[w]) + bf16_hi(dw[w]) * bf16_hi(ow[w]);
  }
#pragma unroll
  for (int width = kLanes / 2; width > 0; width /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, width);
  if (r < rows && part == 0) p.rowdot[r] = dot;
}

// ---- backward pass 2: dQ ------------------------------------------------------------------------

template <int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dq_kernel(const FlashParams p) {
  constexpr int kBr = kQueryTile, kBc = dq_key_tile<HS>();
  constexpr uint32_t kQBytes = kBr * HS * 2, kKVBytes = kBc * HS * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const AttentionLayout& l = p.l;
  const int heads = l.B * l.NH, q_tiles = (l.Tq + kBr - 1) / kBr;
  const int qt = q_tiles - 1 - int(blockIdx.x / unsigned(heads)), bh = int(blockIdx.x % unsigned(heads));
  const int b = bh / l.NH, h = bh % l.NH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int q0 = qt * kBr, offset = l.Tk - l.Tq;
  const HeadBase base(l, b, h);
  const bf16 *kh = p.k + base.kv, *vh = p.v + base.kv;
  const uint32_t s0 = shared_address(smem);
  const uint32_t s_q = 0, s_do = kQBytes, s_k = 2 * kQBytes, s_v = 2 * kQBytes + 2 * kKVBytes;
  const int k_tiles = (offset + min(q0 + kBr, l.Tq) - 1) / kBc + 1;

  load_tile<kBr, HS>(s0 + s_q, p.q + base.q, l.q_token, q0, l.Tq);
  load_tile<kBr, HS>(s0 + s_do, p.dout + base.o, l.o_token, q0, l.Tq);
  load_tile<kBc, HS>(s0 + s_k, kh, l.kv_token, 0, l.Tk);
  load_tile<kBc, HS>(s0 + s_v, vh, l.kv_token, 0, l.Tk);
  cp_async_commit();

  const int row_a = q0 + warp * kRowsPerWarp + lane / 4;
  float lse2[2], D[2];  // lse in base 2, and D, of this thread's rows (0 past Tq: finite, never stored)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool valid = row_a + 8 * r < l.Tq;
    const size_t at = size_t(bh) * l.Tq + row_a + 8 * r;
    lse2[r] = valid ? p.lse_in[at] * kLog2e : 0.0f;
    D[r] = valid ? p.rowdot_in[at] : 0.0f;
  }

  float dq[HS / 8][4] = {};
  for (int kt = 0; kt < k_tiles; ++kt) {
    const uint32_t buf = (kt & 1) * kKVBytes;
    if (kt + 1 < k_tiles) {
      const uint32_t next = kKVBytes - buf;
      load_tile<kBc, HS>(s0 + s_k + next, kh, l.kv_token, (kt + 1) * kBc, l.Tk);
      load_tile<kBc, HS>(s0 + s_v + next, vh, l.kv_token, (kt + 1) * kBc, l.Tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    float s[kBc / 8][4] = {}, dp[kBc / 8][4] = {};
    warp_gemm_abt<HS, kBc>(s, s0 + s_q, warp * kRowsPerWarp, s0 + s_k + buf);
    warp_gemm_abt<HS, kBc>(dp, s0 + s_do, warp * kRowsPerWarp, s0 + s_v + buf);
    const int k0 = kt * kBc;
    const bool masked = k0 + kBc - 1 > q0 + offset || k0 + kBc > l.Tk;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = j >> 1;
        float pr = exp2f(fmaf(s[n][j], p.scale_log2, -lse2[r]));
        if (masked) {
          const int key = k0 + n * 8 + 2 * (lane % 4) + (j & 1);
          if (key > row_a + 8 * r + offset || key >= l.Tk) pr = 0.0f;
        }
        s[n][j] = pr * (dp[n][j] - D[r]);  // dS (without the scale, applied once at the end)
      }
    warp_gemm_pb<HS, kBc>(dq, s, s0 + s_k + buf);
    __syncthreads();
  }
  const float mul[2] = {p.scale, p.scale};
  store_warp_rows<HS>(dq, mul, smem, s_q, warp * kRowsPerWarp, p.dq + base.q, l.q_token, q0 + warp * kRowsPerWarp,
                      l.Tq);
}

// ---- backward pass 3: dK and dV -----------------------------------------------------------------

template <int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dkdv_kernel(const FlashParams p) {
  constexpr int kBc = kQueryTile, kBr = dkdv_query_tile<HS>();  // keys of the block, queries a step
  constexpr uint32_t kKVBytes = kBc * HS * 2, kQBytes = kBr * HS * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const AttentionLayout& l = p.l;
  const int heads = l.B * l.NKV, group = l.NH / l.NKV;
  const int kt = int(blockIdx.x / unsigned(heads)), bg = int(blockIdx.x % unsigned(heads));
  const int b = bg / l.NKV, g = bg % l.NKV;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int k0 = kt * kBc, offset = l.Tk - l.Tq;
  const HeadBase base(l, b, g * group);  // kv = kv head g's rows
  const uint32_t s0 = shared_address(smem);
  // K, V; then Q[2], dO[2]; then lse[2][kBr], D[2][kBr] (fp32).
  const uint32_t s_k = 0, s_v = kKVBytes, s_q = 2 * kKVBytes, s_do = s_q + 2 * kQBytes;
  const uint32_t s_lse = s_do + 2 * kQBytes, s_d = s_lse + 2 * kBr * 4;
  // Query i sees key j when j <= i + offset: the query tiles from the one holding k0 - offset on.
  const int q_tiles = (l.Tq + kBr - 1) / kBr;
  const int first_qt = max(0, k0 - offset) / kBr;
  const int per_head = max(0, q_tiles - first_qt), steps = group * per_head;

  // Step i's query tile of head g group + i / per_head into buffer `buf`.
  auto load_step = [&](int step, uint32_t buf) {
    const int h = g * group + step / per_head, q0 = (first_qt + step % per_head) * kBr;
    const size_t bh = size_t(b) * l.NH + h;
    const size_t q_at = size_t(b) * l.Tq * l.q_token + size_t(h) * HS;
    const size_t o_at = size_t(b) * l.Tq * l.o_token + size_t(h) * HS;
    load_tile<kBr, HS>(s0 + s_q + buf * kQBytes, p.q + q_at, l.q_token, q0, l.Tq);
    load_tile<kBr, HS>(s0 + s_do + buf * kQBytes, p.dout + o_at, l.o_token, q0, l.Tq);
    for (int i = threadIdx.x; i < kBr; i += kFlashThreads) {
      const bool valid = q0 + i < l.Tq;
      const size_t at = valid ? bh * l.Tq + q0 + i : 0;
      cp_async4(s0 + s_lse + (buf * kBr + i) * 4, p.lse_in + at, valid);
      cp_async4(s0 + s_d + (buf * kBr + i) * 4, p.rowdot_in + at, valid);
    }
  };

  load_tile<kBc, HS>(s0 + s_k, p.k + base.kv, l.kv_token, k0, l.Tk);
  load_tile<kBc, HS>(s0 + s_v, p.v + base.kv, l.kv_token, k0, l.Tk);
  if (steps > 0) load_step(0, 0);
  cp_async_commit();

  const float* lse_s = reinterpret_cast<const float*>(smem + s_lse);
  const float* d_s = reinterpret_cast<const float*>(smem + s_d);
  const int key_a = k0 + warp * kRowsPerWarp + lane / 4;  // this thread's keys: key_a, key_a + 8
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int step = 0; step < steps; ++step) {
    const uint32_t buf = step & 1;
    if (step + 1 < steps) {
      load_step(step + 1, buf ^ 1u);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const int q0 = (first_qt + step % per_head) * kBr;
    float s[kBr / 8][4] = {}, dp[kBr / 8][4] = {};
    warp_gemm_abt<HS, kBr>(s, s0 + s_k, warp * kRowsPerWarp, s0 + s_q + buf * kQBytes);    // S^T = K Q^T
    warp_gemm_abt<HS, kBr>(dp, s0 + s_v, warp * kRowsPerWarp, s0 + s_do + buf * kQBytes);  // dP^T = V dO^T
    const bool masked = k0 + kBc - 1 > q0 + offset || q0 + kBr > l.Tq;
#pragma unroll
    for (int n = 0; n < kBr / 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = n * 8 + 2 * (lane % 4) + (j & 1);  // the query within the step's tile
        float pr = exp2f(fmaf(s[n][j], p.scale_log2, -lse_s[buf * kBr + col] * kLog2e));
        if (masked) {
          const int key = key_a + 8 * (j >> 1), query = q0 + col;
          if (key > query + offset || query >= l.Tq) pr = 0.0f;
        }
        s[n][j] = pr;
        dp[n][j] = pr * (dp[n][j] - d_s[buf * kBr + col]);  // dS^T
      }
    warp_gemm_pb<HS, kBr>(dv, s, s0 + s_do + buf * kQBytes);  // dV += P^T dO
    warp_gemm_pb<HS, kBr>(dk, dp, s0 + s_q + buf * kQBytes);  // dK += dS^T Q
    __syncthreads();
  }
  cp_async_wait<0>();  // with no steps, the K and V loads may still be in flight
  __syncthreads();
  const float one[2] = {1.0f, 1.0f}, mul[2] = {p.scale, p.scale};
  // This warp's K and V rows are read by no other warp (they are its mmas' A operands).
  store_warp_rows<HS>(dk, mul, smem, s_k, warp * kRowsPerWarp, p.dk + base.kv, l.kv_token,
                      k0 + warp * kRowsPerWarp, l.Tk);
  store_warp_rows<HS>(dv, one, smem, s_v, warp * kRowsPerWarp, p.dv + base.kv, l.kv_token,
                      k0 + warp * kRowsPerWarp, l.Tk);
}

// ---- launches -----------------------------------------------------------------------------------

template <int HS>
constexpr size_t forward_shared_bytes() {
  return size_t(kQueryTile + 4 * kKeyTile) * HS * 2;  // Q, K[2], V[2]
}
template <int HS>
constexpr size_t dq_shared_bytes() {
  return size_t(2 * kQueryTile + 4 * dq_key_tile<HS>()) * HS * 2;  // Q, dO, K[2], V[2]
}
template <int HS>
constexpr size_t dkdv_shared_bytes() {
  constexpr int kBr = dkdv_query_tile<HS>();
  return size_t(2 * kQueryTile + 4 * kBr) * HS * 2 + 4 * kBr * sizeof(float);  // K, V, Q[2], dO[2], lse[2], D[2]
}

/// The most devices the opt-in below remembers per kernel; a device past it opts in every launch.
constexpr int kMaxOptInDevices = 64;

/// Launches Kernel with `shared` bytes of dynamic shared memory (the same for every launch of it).
/// Above 48 KiB a kernel must opt in with cudaFuncSetAttribute, which holds for its process and
/// device; so it is set once per kernel and device (a rank drives one device, so in practice once
/// per kernel), not on every launch. Kernel is a template argument so that each kernel has its own
/// flags: the three kernels share one function type. A failed opt-in throws and leaves its flag
/// unset.
template <void (*Kernel)(FlashParams)>
void launch_flash(size_t blocks, size_t shared, CudaContext& ctx, const FlashParams& p, const char* name) {
  ZT_CHECK(blocks <= size_t(INT32_MAX), name, ": ", blocks, " blocks is more than a grid holds");
  const auto opt_in = [&] {
    ZT_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)), name);
  };
  static std::once_flag opted_in[kMaxOptInDevices];
  if (ctx.device >= 0 && ctx.device < kMaxOptInDevices) std::call_once(opted_in[ctx.device], opt_in);
  else opt_in();
  Kernel<<<unsigned(blocks), kFlashThreads, shared, ctx.compute>>>(p);
  ZT_CUDA_CHECK_LAUNCH(name);
}

FlashParams make_params(const AttentionLayout& l) {
  FlashParams p{};
  p.l = l;
  p.scale = 1.0f / std::sqrt(float(l.hs));
  p.scale_log2 = p.scale * kLog2e;
  return p;
}

template <int HS>
void flash_forward(CudaContext& ctx, const FlashParams& p) {
  const size_t blocks = div_up(size_t(p.l.Tq), kQueryTile) * size_t(p.l.B) * p.l.NH;
  launch_flash<flash_forward_kernel<HS>>(blocks, forward_shared_bytes<HS>(), ctx, p, "flash_forward_kernel");
}

template <int HS>
void flash_backward(CudaContext& ctx, const FlashParams& p) {
  const size_t q_blocks = div_up(size_t(p.l.Tq), kQueryTile) * size_t(p.l.B) * p.l.NH;
  const size_t k_blocks = div_up(size_t(p.l.Tk), kQueryTile) * size_t(p.l.B) * p.l.NKV;
  const size_t rowdot_threads = size_t(p.l.B) * p.l.NH * p.l.Tq * (HS / 8);
  flash_rowdot_kernel<HS><<<unsigned(div_up(rowdot_threads, 256)), 256, 0, ctx.compute>>>(p);
  ZT_CUDA_CHECK_LAUNCH("flash_rowdot_kernel");
  launch_flash<flash_backward_dq_kernel<HS>>(q_blocks, dq_shared_bytes<HS>(), ctx, p, "flash_backward_dq_kernel");
  launch_flash<flash_backward_dkdv_kernel<HS>>(k_blocks, dkdv_shared_bytes<HS>(), ctx, p,
                                               "flash_backward_dkdv_kernel");
}

// ---- the fallback's fp32 helpers: one warp per query row ---------------------------------------

constexpr int kRowWarps = 4;

struct QueryRow {
  size_t row;  // ((b NH) + h) Tq + i: the index into lse
  int i, last;  // the query, and the last key it sees
  size_t q_at, k_at;
  __device__ QueryRow(const AttentionLayout& l, size_t r) : row(r) {
    const int b = int(r / l.Tq / l.NH), h = int(r / l.Tq % l.NH);
    i = int(r % l.Tq);
    last = l.Tk - l.Tq + i;
    q_at = (size_t(b) * l.Tq + i) * l.q_token + size_t(h) * l.hs;
    k_at = size_t(b) * l.Tk * l.kv_token + size_t(h / (l.NH / l.NKV)) * l.hs;
  }
};

__device__ __forceinline__ float dot_f32(const float* a, const float* b, int n) {
  float acc = 0;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Each lane keeps an online (max, sum) over its keys; the warp merges them.
__global__ void attention_lse_f32_kernel(float* lse, const float* q, const float* k, AttentionLayout l, float scale) {
  const size_t r = size_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= size_t(l.B) * l.NH * l.Tq) return;  // the whole warp leaves together
  const QueryRow qr(l, r);
  float m = -INFINITY, sum = 0;
  for (int t2 = lane; t2 <= qr.last; t2 += kWarp) {
    const float x = dot_f32(q + qr.q_at, k + qr.k_at + size_t(t2) * l.kv_token, l.hs) * scale;
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  }
  const float max_all = warp_max(m);
  const float total = warp_sum(m == -INFINITY ? 0.0f : sum * expf(m - max_all));
  if (lane == 0) lse[r] = max_all + logf(total);
}

__global__ void attention_probs_from_lse_f32_kernel(float* probs, const float* q, const float* k, const float* lse,
                                                    AttentionLayout l, float scale) {
  const size_t r = size_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= size_t(l.B) * l.NH * l.Tq) return;
  const QueryRow qr(l, r);
  const float row_lse = lse[r];
  float* out = probs + r * l.Tk;
  for (int t2 = lane; t2 < l.Tk; t2 += kWarp)
    out[t2] = t2 <= qr.last
                  ? expf(dot_f32(q + qr.q_at, k + qr.k_at + size_t(t2) * l.kv_token, l.hs) * scale - row_lse)
                  : 0.0f;
}

}  // namespace

AttentionLayout packed_attention_layout(int B, int T, int C, int NH) {
  ZT_CHECK(NH > 0 && C % NH == 0, "attention: C=", C, " is not a multiple of NH=", NH);
  AttentionLayout l;
  l.B = B, l.NH = NH, l.NKV = NH, l.Tq = T, l.Tk = T, l.hs = C / NH;
  l.q_token = l.kv_token = 3 * size_t(C);
  l.o_token = size_t(C);
  return l;
}

AttentionLayout gqa_attention_layout(int B, int Tq, int Tk, int NH, int NKV, int hs) {
  ZT_CHECK(NKV > 0 && NH % NKV == 0, "gqa_attention: NH=", NH, " is not a multiple of NKV=", NKV);
  AttentionLayout l;
  l.B = B, l.NH = NH, l.NKV = NKV, l.Tq = Tq, l.Tk = Tk, l.hs = hs;
  l.q_token = l.o_token = size_t(NH) * hs;
  l.kv_token = size_t(NKV) * hs;
  return l;
}

bool flash_attention_supported(const AttentionLayout& l, std::initializer_list<const void*> pointers) {
  return (l.hs == 64 || l.hs == 128) && l.NKV > 0 && l.NH % l.NKV == 0 && l.Tk >= l.Tq && l.q_token % 8 == 0 &&
         l.kv_token % 8 == 0 && l.o_token % 8 == 0 && all_aligned16(pointers);
}

std::string flash_attention_unsupported_reason(const AttentionLayout& l, std::initializer_list<const void*> pointers,
                                               std::initializer_list<const char*> names) {
  if (flash_attention_supported(l, pointers)) return "";
  if (l.hs != 64 && l.hs != 128) return cat("head size ", l.hs, "; flash takes 64 or 128");
  if (l.NKV <= 0 || l.NH % l.NKV != 0) return cat("NH=", l.NH, " not a multiple of NKV=", l.NKV);
  if (l.Tk < l.Tq) return cat("fewer keys (", l.Tk, ") than queries (", l.Tq, ")");
  if (l.q_token % 8 || l.kv_token % 8 || l.o_token % 8)
    return cat("token strides q ", l.q_token, ", kv ", l.kv_token, ", out ", l.o_token,
               " elements, not all multiples of 8");
  std::string unaligned;
  const char* const* name = names.begin();
  for (const void* p : pointers) {
    const char* what = name != names.end() ? *name++ : "a tensor";
    if (!is_aligned(p, 16)) unaligned += cat(unaligned.empty() ? "" : ", ", what);
  }
  return unaligned.empty() ? "unsupported shape" : cat(unaligned, " not 16-byte aligned");
}

void launch_flash_attention_forward(CudaContext& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                                    const bf16* v, const AttentionLayout& l) {
  ZT_CHECK(flash_attention_supported(l, {out, q, k, v}), "flash attention: unsupported shape (hs ", l.hs, ")");
  if (size_t(l.B) * l.NH * l.Tq == 0) return;
  FlashParams p = make_params(l);
  p.out = out, p.lse = lse, p.q = q, p.k = k, p.v = v;
  if (l.hs == 64) flash_forward<64>(ctx, p);
  else flash_forward<128>(ctx, p);
}

void launch_flash_attention_backward(CudaContext& ctx, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                     const bf16* out, const bf16* q, const bf16* k, const bf16* v, const float* lse,
                                     const AttentionLayout& l) {
  ZT_CHECK(flash_attention_supported(l, {dq, dk, dv, dout, out, q, k, v}), "flash attention: unsupported shape (hs ",
           l.hs, ")");
  ZT_CHECK(l.Tq == l.Tk, "flash attention backward: Tq=", l.Tq, " != Tk=", l.Tk);
  if (size_t(l.B) * l.NH * l.Tq == 0) return;
  FlashParams p = make_params(l);
  p.dq = dq, p.dk = dk, p.dv = dv, p.dout = dout, p.out_in = out, p.q = q, p.k = k, p.v = v, p.lse_in = lse;
  float* rowdot = static_cast<float*>(ctx.scratch(sizeof(float) * size_t(l.B) * l.NH * l.Tq));
  p.rowdot = rowdot, p.rowdot_in = rowdot;
  if (l.hs == 64) flash_backward<64>(ctx, p);
  else flash_backward<128>(ctx, p);
}

void launch_attention_lse_f32(CudaContext& ctx, float* lse, const float* q, const float* k,
                              const AttentionLayout& l) {
  const size_t rows = size_t(l.B) * l.NH * l.Tq;
  if (rows == 0) return;
  attention_lse_f32_kernel<<<div_up(rows, kRowWarps), kRowWarps * kWarp, 0, ctx.compute>>>(
      lse, q, k, l, 1.0f / std::sqrt(float(l.hs)));
  ZT_CUDA_CHECK_LAUNCH("attention_lse_f32_kernel");
}

void launch_attention_probs_from_lse_f32(CudaContext& ctx, float* probs, const float* q, const float* k,
                                         const float* lse, const AttentionLayout& l) {
  const size_t rows = size_t(l.B) * l.NH * l.Tq;
  if (rows == 0) return;
  attention_probs_from_lse_f32_kernel<<<div_up(rows, kRowWarps), kRowWarps * kWarp, 0, ctx.compute>>>(
      probs, q, k, lse, l, 1.0f / std::sqrt(float(l.hs)));
  ZT_CUDA_CHECK_LAUNCH("attention_probs_from_lse_f32_kernel");
}

}  // namespace zt::cuda
