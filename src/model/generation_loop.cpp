#include "model/generation_loop.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/timer.h"

namespace zt {
namespace {

// One sequence in a decoder slot: its prompt, how much of it has run, its own sampler (seeded
// alike for every prompt, so its draws never depend on what runs beside it), what it generated.
struct Sequence {
  size_t prompt;
  Sampler sampler;
  size_t fed = 0;
  std::vector<int32_t> generated;
};

class Loop {
 public:
  Loop(Decoder& decoder, const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& sampling,
       uint64_t seed, const StopRule& stop, int vocab_size, GenerationStats& stats)
      : decoder_(decoder), prompts_(prompts), sampling_(sampling), seed_(seed), stop_(stop), vocab_(vocab_size),
        stats_(stats), out_(prompts.size()), slots_(size_t(decoder.slots())) {}

  bool has_work() const {
    return next_ < prompts_.size() || std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s; });
  }

  // One forward pass: free slots take the next prompts, then every sequence runs its next tokens:
  // its last id where it is generating, the next chunk of its prompt where it is reading one (a
  // chunk a slot is what the decoder's pass holds); with nothing here, the idle pass.
  void pass() {
    for (int slot = 0; slot < decoder_.slots(); ++slot) {
      if (slots_[size_t(slot)] || next_ >= prompts_.size()) continue;
      slots_[size_t(slot)].emplace(Sequence{next_++, Sampler(sampling_, seed_), 0, {}});
      decoder_.reset(slot);
    }
    std::vector<DecoderSegment> segments;
    std::vector<int32_t> tokens;
    size_t prompt_tokens = 0;
    for (int slot = 0; slot < decoder_.slots(); ++slot) {
      const std::optional<Sequence>& s = slots_[size_t(slot)];
      if (!s) continue;
      if (!reading(*s)) {
        segments.push_back({slot, 1});
        tokens.push_back(s->generated.back());
        continue;
      }
      const std::vector<int32_t>& prompt = prompts_[s->prompt];
      const size_t n = std::min(size_t(decoder_.chunk()), prompt.size() - s->fed);
      segments.push_back({slot, int(n)});
      tokens.insert(tokens.end(), prompt.begin() + long(s->fed), prompt.begin() + long(s->fed + n));
      prompt_tokens += n;
    }
    if (segments.empty()) {  // nothing here: a pass for the other ranks' gathers
      decoder_.reset(0);
      decoder_.forward({{0, 1}}, {0});
      decoder_.reset(0);
      stats_.idle_passes += 1;
      return;
    }
    Stopwatch clock;
    const float* logits = decoder_.forward(segments, tokens);
    (prompt_tokens ? stats_.prefill_s : stats_.decode_s) += clock.seconds();
    (prompt_tokens ? stats_.prefill_passes : stats_.decode_passes) += 1;
    stats_.prompt_tokens += prompt_tokens;
    for (size_t i = 0; i < segments.size(); ++i) {
      Sequence& s = *slots_[size_t(segments[i].slot)];
      if (reading(s)) {
        s.fed += size_t(segments[i].tokens);
        if (reading(s)) continue;  // the prompt's last token gives the first new one
      }
      sample(segments[i].slot, logits + i * size_t(vocab_));
    }
  }

  std::vector<std::vector<int32_t>> take() { return std::move(out_); }

 private:
  bool reading(const Sequence& s) const { return s.fed < prompts_[s.prompt].size(); }

  // The slot's next id from its logits; a sequence that stops there leaves its slot.
  void sample(int slot, const float* logits) {
    Sequence& s = *slots_[size_t(slot)];
    s.generated.push_back(s.sampler.next(logits, vocab_));
    if (stop_.eos.count(s.generated.back()) || int(s.generated.size()) >= stop_.max_new_tokens ||
        decoder_.position(slot) >= decoder_.max_positions()) {
      stats_.new_tokens += s.generated.size();
      out_[s.prompt] = std::move(s.generated);
      slots_[size_t(slot)].reset();
    }
  }

  Decoder& decoder_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const SamplingParams& sampling_;
  uint64_t seed_;
  const StopRule& stop_;
  int vocab_;
  GenerationStats& stats_;
  std::vector<std::vector<int32_t>> out_;
  std::vector<std::optional<Sequence>> slots_;
  size_t next_ = 0;
};

}  // namespace

std::vector<std::vector<int32_t>> generate_continuations(Decoder& decoder,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const SamplingParams& sampling, uint64_t seed,
                                                         const StopRule& stop, int vocab_size, GenerationStats& stats,
                                                         const PassSync* sync) {
  for (const std::vector<int32_t>& prompt : prompts) ZT_CHECK(!prompt.empty(), "a prompt of no tokens");
  Loop loop(decoder, prompts, sampling, seed, stop, vocab_size, stats);
  auto agree = [&](bool mine) { return sync ? sync->any_work(mine) : mine; };
  for (bool more = agree(loop.has_work()); more;) {
    loop.pass();
    more = agree(loop.has_work());
    if (sync) sync->end_pass(more);
  }
  return loop.take();
}

}  // namespace zt
