// Deterministic distributed sampling.
//
// The training data is cut into windows of T+1 tokens: window j covers tokens [jT, jT + T] of the
// concatenated shards (T inputs, T next-token targets). Global sample g (counting from the start
// of training) is window perm_e(g mod W) of epoch e = g / W, where W is the number of windows and
// perm_e a seeded bijection on [0, W) (a Feistel network, so no table is stored). Every epoch
// visits each window exactly once.
//
// The global batch of an optimizer step is the next `global_batch` samples; rank r of N takes
// the contiguous slice [r B/N, (r+1) B/N), and micro-step m of that rank the next micro-batch
// inside its slice. So the data of a step depends only on (seed, step), never on the world
// size, the ZeRO stage or how the batch is split into micro-batches.
#pragma once

#include <cstdint>

#include "core/hash.h"  // mix64 (model/gpt2_layout.cpp still reaches it through this header)
#include "data/token_shard.h"

namespace zt {

/// A seeded bijection on [0, n) (4-round Feistel network with cycle walking).
class FeistelPermutation {
 public:
  FeistelPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t x) const;

 private:
  uint64_t n_, key_;
  int half_bits_;
};

class DistributedSampler {
 public:
  DistributedSampler(const TokenDataset& data, int seq_len, uint64_t seed);

  uint64_t num_windows() const { return num_windows_; }
  /// Window index of global sample g.
  uint64_t window_of(uint64_t g) const;
  /// Fills inputs/targets [count, T] for global samples [first, first + count).
  void fill(uint64_t first, int64_t count, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenDataset& data_;
  int seq_len_;
  uint64_t seed_, num_windows_;
};

/// Where training stands in the data: the next global sample. Saved in checkpoints.
struct DataPosition {
  uint64_t next_sample = 0;
};

/// The fixed eval definition: window i covers tokens [iT, iT + T] of the concatenated eval
/// shards; eval_loss is the mean over all predictions of the first `max_windows` windows (all
/// windows when 0).
struct EvalWindows {
  EvalWindows(const TokenDataset& data, int seq_len, int64_t max_windows);
  int64_t count() const { return count_; }
  void fill(int64_t first, int64_t n, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenDataset& data_;
  int seq_len_;
  int64_t count_;
};

}  // namespace zt
