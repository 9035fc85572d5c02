// Incremental forward for generation: each pass runs only the new tokens, reading the keys and
// values of the earlier positions from a cache. The decoder holds `slots` sequences, each with
// its own cache and position; one forward pass runs some tokens of each of several of them (a
// chunk of one's prompt beside another's next token), the norms and matrix products over all
// their rows together, each sequence's attention over its own cache. The weights come unit by
// unit from a ParamSource<float> (acquired before a unit runs, released after), as the training
// model takes them (zero/inference_weights.h: the whole model, or each unit gathered from the
// ranks' partitions first). Nothing here is trained.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device_array.h"
#include "model/model_layout.h"
#include "model/param_source.h"

namespace zt {

/// One sequence's part of a forward pass: `tokens` tokens of sequence `slot`, from its position on.
struct DecoderSegment {
  int slot = 0;
  int tokens = 1;
};

class Decoder {
 public:
  /// Turns the backend's batch invariance back off (KernelOps::set_batch_invariant).
  virtual ~Decoder();
  /// One forward pass: segments[i].tokens of `tokens`, in order, run in sequence
  /// segments[i].slot (distinct slots, each at most chunk() tokens) from its position on. Returns
  /// the logits of each segment's last token: segments.size() rows of vocab_size floats in host
  /// memory, row i for segments[i], valid until the next call. Each row is what the sequence's
  /// tokens compute alone, bit for bit, where batch_invariant().
  const float* forward(const std::vector<DecoderSegment>& segments, const std::vector<int32_t>& tokens);
  /// Starts a new sequence in `slot` at position 0. The cache's rows are overwritten as it runs,
  /// and attention reads only the positions run since: nothing of the last sequence is seen.
  void reset(int slot = 0) { positions_.at(size_t(slot)) = 0; }
  /// Tokens run so far in `slot`.
  int position(int slot = 0) const { return positions_.at(size_t(slot)); }
  /// The cache's length: no slot's position passes it.
  int max_positions() const { return max_positions_; }
  /// How many sequences the decoder holds.
  int slots() const { return int(positions_.size()); }
  /// The most tokens of one sequence a forward pass runs: a prompt runs in chunks of this many.
  int chunk() const { return chunk_; }
  /// Whether the backend's matrix products are batch-invariant (KernelOps::set_batch_invariant,
  /// which the decoder turns on unless told not to): then a sequence's logits do not depend on
  /// the others in its passes, nor on their number. Every fp32 table keeps it (CPU, emulated,
  /// CUDA).
  bool batch_invariant() const { return batch_invariant_; }

 protected:
  /// `chunk`: the most tokens of one sequence a pass runs; tokens_ holds chunk x slots rows,
  /// logits_ one row a slot. `batch_invariant`: asked of the backend's kernels.
  Decoder(Backend& backend, int vocab_size, int max_positions, int chunk, int slots, bool batch_invariant = true);
  /// Runs the segments' tokens (in tokens_, in order) each from positions_[slot], leaving each
  /// segment's last token's logits in logits_'s rows, row i for segments[i].
  virtual void run(const std::vector<DecoderSegment>& segments) = 0;

  Backend& backend_;
  int max_positions_, chunk_;
  std::vector<int> positions_;   // each slot's
  DeviceArray<int32_t> tokens_;  // device: this pass's tokens
  DeviceArray<float> logits_;    // device: this pass's logits, a row a segment

 private:
  int vocab_size_;
  bool batch_invariant_ = false;
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
/// sequences of up to max_positions tokens each; `batch_invariant` asks the backend for it.
std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, ParamSource<float>& params,
                                      int max_positions, int slots = 1, bool batch_invariant = true);

}  // namespace zt
