// Incremental forward for generation: each call runs only the new tokens, reading the keys and
// values of the earlier positions from a cache. The decoder holds `slots` sequences, each with
// its own cache and position: a prompt runs into one slot (append), and a decoding step runs one
// token of each of several slots at once (step), the matrix products over all of them together.
// The weights come unit by unit from a ParamSource<float> (acquired before a unit runs, released
// after), as the training model takes them (zero/inference_weights.h: the whole model, or each
// unit gathered from the ranks' partitions first). Nothing here is trained.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device_array.h"
#include "model/model_layout.h"
#include "model/param_source.h"

namespace zt {

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Runs `tokens` of sequence `slot` at positions [position(slot), position(slot) + tokens.size())
  /// and returns the logits of the last one: vocab_size floats in host memory, valid until the
  /// next call.
  const float* append(const std::vector<int32_t>& tokens, int slot = 0);
  /// Runs tokens[i] of sequence slots[i] (distinct slots), each at its own position, and returns
  /// their logits: tokens.size() rows of vocab_size floats in host memory, row i for slots[i],
  /// valid until the next call. Each row is what append({tokens[i]}, slots[i]) would compute, to
  /// the bit where the backend's matrix products do not depend on the row count (the CPU's).
  const float* step(const std::vector<int>& slots, const std::vector<int32_t>& tokens);
  /// Starts a new sequence in `slot` at position 0. The cache's rows are overwritten as it runs,
  /// and attention reads only the positions run since: nothing of the last sequence is seen.
  void reset(int slot = 0) { positions_.at(size_t(slot)) = 0; }
  /// Tokens run so far in `slot`.
  int position(int slot = 0) const { return positions_.at(size_t(slot)); }
  /// The cache's length: no slot's position passes it.
  int max_positions() const { return max_positions_; }
  /// How many sequences the decoder holds.
  int slots() const { return int(positions_.size()); }
  /// The most tokens of one sequence a forward pass runs: append() of more runs several passes.
  int chunk() const { return chunk_; }

 protected:
  /// `chunk`: the most tokens one run() takes; tokens_ and logits_ hold max(chunk, slots) rows.
  Decoder(Backend& backend, int vocab_size, int max_positions, int chunk, int slots);
  /// Runs n tokens of `slot` (already in tokens_) at positions_[slot], leaving the last one's
  /// logits in logits_'s first row.
  virtual void run(int slot, int n) = 0;
  /// Runs tokens_[i] of slots[i] at positions_[slots[i]], leaving their logits in logits_'s rows.
  virtual void run_step(const std::vector<int>& slots) = 0;

  Backend& backend_;
  int max_positions_, chunk_;
  std::vector<int> positions_;   // each slot's
  DeviceArray<int32_t> tokens_;  // device: this run's tokens
  DeviceArray<float> logits_;    // device: this run's logits, a row a sequence

 private:
  /// Uploads n tokens to tokens_.
  void upload(const int32_t* tokens, int n);
  /// Copies `rows` rows of logits_ to the host and returns them.
  const float* download(int rows);

  int vocab_size_;
  DeviceArray<int32_t> tokens_staging_;  // pinned
  DeviceArray<float> logits_host_;       // pinned
};

/// Bytes a decoder of `layout` for `slots` sequences of up to max_positions tokens allocates: its
/// KV caches and its other device buffers (activations, logits, tokens, rope tables), and its
/// pinned staging (tokens in, logits out). What make_decoder allocates, to the byte.
struct DecoderMemory {
  size_t kv_cache = 0, device = 0, pinned = 0;
};
DecoderMemory decoder_memory(const ModelLayout& layout, int max_positions, int slots);

/// The decoder of `layout`'s architecture over `params` (which must outlive it), for `slots`
/// sequences of up to max_positions tokens each.
std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, ParamSource<float>& params,
                                      int max_positions, int slots = 1);

}  // namespace zt
