// How the CPU's bf16 kernels (bf16_kernels.cpp) cut an op into tiles whose fp32 copies fit their
// scratch budget. The same functions size the kernels' scratch and the memory estimate's
// (model_memory.cpp), so that the two agree to the byte.
//
// An op's operands are widened to fp32 a tile at a time and the fp32 kernels run on the tile:
// rows (or whole sequences, for attention and the rotary) for ops whose rows are independent,
// and for a GEMM tiles of its output, the inner dimension whole where it fits.
#pragma once

#include <algorithm>
#include <cstddef>

namespace zt::cpu {

/// The default scratch budget of the CPU's bf16 kernels, in floats (64 MiB): a GPT-2 124M step's
/// largest op (the lm_head's backward, about 250 M floats at batch 4 x 1024) runs in tiles
/// instead of widening whole.
inline constexpr size_t kBf16ScratchFloats = size_t(16) << 20;

/// A tile that stays in a core's cache while several passes run over it (1 MiB of fp32 a thread):
/// the classifier's softmax forward and backward (bf16_kernels.cpp).
inline constexpr size_t kCacheTileFloats = size_t(1) << 18;

/// `units` independent pieces of `per_unit` floats each, beside `fixed` floats every tile needs:
/// how many pieces a tile takes (at least one, even past the budget).
inline size_t units_per_tile(size_t units, size_t per_unit, size_t fixed, size_t budget) {
  const size_t room = budget > fixed ? (budget - fixed) / std::max<size_t>(per_unit, 1) : 0;
  return std::clamp<size_t>(room, 1, std::max<size_t>(units, 1));
}
/// The floats of such a tile.
inline size_t tile_floats(size_t units, size_t per_unit, size_t fixed, size_t budget) {
  return fixed + units_per_tile(units, per_unit, fixed, budget) * per_unit;
}

/// A GEMM C[M,N] (+)= op(A)[M,K] op(B)[K,N] in tiles: output tiles of mb x nb, each summed over
/// K in blocks of kb (a block's products summed by the GEMM, the blocks added in fp32 in order);
/// op(A)'s and op(B)'s blocks widened per tile, and, where C is bf16 (`c_scratch`), an fp32 tile
/// of C. Where C is fp32 (a parameter gradient) the tiles are whole rows of C, written in place,
/// and K is whole.
struct GemmTiles {
  size_t mb = 0, nb = 0, kb = 0;

  /// The floats one tile widens.
  size_t floats(bool c_scratch) const { return mb * kb + kb * nb + (c_scratch ? mb * nb : 0); }
};

inline GemmTiles plan_gemm(size_t M, size_t N, size_t K, bool c_scratch, size_t budget) {
  GemmTiles t{M, N, K};
  if (t.floats(c_scratch) <= budget) return t;  // in one piece
  const size_t half = budget / 2;
  if (!c_scratch) {  // rows of C, all of op(B)
    t.mb = units_per_tile(M, K, K * N, budget);
  } else if (K > N && K * N > half) {
    // A long sum into narrow rows (the lm_head's dx: K is the vocabulary): every column of C at
    // once, K in blocks, so that op(A), the large operand, is widened once.
    t.mb = std::clamp<size_t>(half / std::max<size_t>(N, 1), 1, M);
    t.kb = std::clamp<size_t>((budget - std::min(budget, t.mb * N)) / (t.mb + N), 1, K);
  } else {
    // K whole; op(B) in column blocks when it passes half the budget (the lm_head's forward).
    if (K * N > half) t.nb = std::max<size_t>(1, half / std::max<size_t>(K, 1));
    t.mb = units_per_tile(M, K + t.nb, K * t.nb, budget);
  }
  return t;
}

}  // namespace zt::cpu
