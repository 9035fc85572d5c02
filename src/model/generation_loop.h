// Generation for many prompts over a Decoder's slots (continuous batching): a prompt takes a free
// slot, and each forward pass ("pass") runs every slot's sequence one step on: the next chunk of
// its prompt while it is reading one (up to 64 tokens of a sequence a pass), else its last
// generated token. A sequence that stops (an EOS, max_new_tokens, the
// cache's end) leaves, and the next prompt takes its slot. Each sequence has its own sampler
// seeded alike, and each pass's rows are bit for bit what the sequence computes alone (the
// decoder's GEMMs are batch-invariant, decoder.h), so a prompt gets the ids it gets alone.
//
// Under ZeRO-3 every rank must run the same number of passes, since each pass gathers the
// weights with collectives: with a PassSync the ranks agree before each pass whether any has work,
// a rank with none runs an idle pass (one token in slot 0, discarded), and each pass ends with
// end_pass.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "model/decoder.h"
#include "model/sampler.h"

namespace zt {

struct StopRule {
  std::set<int32_t> eos;   ///< any of these ends a sequence (it is kept as its last id)
  int max_new_tokens = 0;  ///< ids generated at most
};

struct GenerationStats {
  size_t prompt_tokens = 0, new_tokens = 0;
  size_t prefill_passes = 0, decode_passes = 0, idle_passes = 0;
  double prefill_s = 0, decode_s = 0;  ///< passes with prompt tokens; passes with none
};

/// What ties the passes of several ranks together (ZeRO-3).
struct PassSync {
  /// True when any rank has work; `mine`: whether this rank has. Collective.
  std::function<bool(bool mine)> any_work;
  /// After each pass; `another`: a pass follows (any_work's answer). Collective.
  std::function<void(bool another)> end_pass;
};

/// Every prompt's generated ids, in the prompts' order. `vocab_size`: the logits' row length.
std::vector<std::vector<int32_t>> generate_continuations(Decoder& decoder,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const SamplingParams& sampling, uint64_t seed,
                                                         const StopRule& stop, int vocab_size, GenerationStats& stats,
                                                         const PassSync* sync = nullptr);

}  // namespace zt
