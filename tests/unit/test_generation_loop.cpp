// decoder_memory against what make_decoder allocates, measured by the pools; the decoders of
// GPT-2 and the Llama family giving each sequence the same logits, bit for bit, batched as alone;
// then the generation loop over a stand-in decoder whose logits pick the next id from a hash of the
// sequence so far, so that any token fed to the wrong sequence, at the wrong place, or twice
// changes what follows. Batched and with other ranks still busy (a PassSync), every prompt gets
// the ids it gets alone, and the idle passes and end_pass calls are the ones the ranks need.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/memory_pool.h"
#include "model/generation_loop.h"
#include "model/model_layout.h"
#include "tiny_models.h"

namespace zt {
namespace {

constexpr int kVocab = 37;

class HashDecoder final : public Decoder {
 public:
  HashDecoder(Backend& backend, int chunk, int slots, int max_positions)
      : Decoder(backend, kVocab, max_positions, chunk, slots), history_(size_t(slots)) {}
  int runs = 0;                                        // forward passes
  std::vector<std::vector<DecoderSegment>> passes;      // each pass's segments

 private:
  void run(const std::vector<DecoderSegment>& segments) override {
    int n = 0;
    for (const DecoderSegment& s : segments) n += s.tokens;
    const std::vector<int32_t> tokens = read_tokens(n);
    passes.push_back(segments);
    size_t at = 0;
    std::vector<int> slots;
    for (const DecoderSegment& s : segments) {
      std::vector<int32_t>& history = history_[size_t(s.slot)];
      if (position(s.slot) == 0) history.clear();  // a new sequence (Decoder::reset)
      history.insert(history.end(), tokens.begin() + long(at), tokens.begin() + long(at) + s.tokens);
      at += size_t(s.tokens);
      slots.push_back(s.slot);
    }
    write_logits(slots);
  }
  std::vector<int32_t> read_tokens(int n) {
    ++runs;
    std::vector<int32_t> out(static_cast<size_t>(n), 0);
    backend_.copy_to_host(out.data(), tokens_.data(), size_t(n) * sizeof(int32_t));
    return out;
  }
  void write_logits(const std::vector<int>& slots) {
    std::vector<float> rows(slots.size() * kVocab, 0.0f);
    for (size_t i = 0; i < slots.size(); ++i) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the sequence so far
      for (int32_t t : history_[size_t(slots[i])]) h = (h ^ uint64_t(t + 1)) * 1099511628211ull;
      rows[i * kVocab + h % kVocab] = 1.0f;
    }
    backend_.copy_from_host(logits_.data(), rows.data(), rows.size() * sizeof(float));
  }
  std::vector<std::vector<int32_t>> history_;
};

// Weights no one may read: building a decoder allocates, it runs nothing.
class NoWeights final : public ParamSource<float> {
 public:
  const float* acquire_weights(int unit) override { return fail(unit); }
  void release_weights(int unit) override { fail(unit); }
  float* grad_accumulator(int unit) override { return fail(unit); }
  void grads_done(int unit) override { fail(unit); }

 private:
  static std::nullptr_t fail(int unit) {
    ADD_FAILURE() << "unit " << unit << "'s weights were asked for while the decoder was built";
    return nullptr;
  }
};

TEST(DecoderMemory, IsWhatTheDecoderAllocates) {
  auto backend = make_cpu_backend();
  for (const ModelConfig& config : {testing::tiny_gpt2(), testing::tiny_llama()}) {
    const std::unique_ptr<ModelLayout> layout = make_model_layout(config);
    NoWeights weights;
    for (const auto& [positions, slots] : std::vector<std::pair<int, int>>{{1, 1}, {16, 1}, {9, 3}, {16, 7}}) {
      const PoolBytes before = pool_in_use();
      const std::unique_ptr<Decoder> decoder = make_decoder(*layout, *backend, weights, positions, slots);
      const PoolBytes after = pool_in_use();
      const DecoderMemory m = decoder_memory(*layout, positions, slots);
      const std::string where = config.model_type + ", " + std::to_string(positions) + " positions, " +
                                std::to_string(slots) + " sequences";
      EXPECT_EQ(after[Pool::kDevice] - before[Pool::kDevice], m.kv_cache + m.device) << where;
      EXPECT_EQ(after[Pool::kPinned] - before[Pool::kPinned], m.pinned) << where;
      const int kv_heads = config.n_kv_head ? config.n_kv_head : config.n_head;  // GPT-2: every head's
      EXPECT_EQ(m.kv_cache, size_t(2 * config.n_layer * positions * slots * kv_heads * config.head_size()) * 4)
          << where;
    }
  }
}

// Every parameter from the layout's own initialisation, the whole model in one array.
class WholeWeights final : public ParamSource<float> {
 public:
  explicit WholeWeights(const ModelLayout& layout) : layout_(layout), weights_(layout.flat_size()) {
    layout.init(5, weights_.data(), 0, weights_.size());
  }
  const float* acquire_weights(int unit) override { return weights_.data() + layout_.unit_offset(unit); }
  void release_weights(int) override {}
  float* grad_accumulator(int) override { return nullptr; }
  void grads_done(int) override {}

 private:
  const ModelLayout& layout_;
  std::vector<float> weights_;
};

// A sequence's passes: its prompt in chunks of the decoder's chunk, then one given token a pass.
std::vector<std::vector<int32_t>> script(int length, int chunk, int seed, int vocab) {
  std::vector<std::vector<int32_t>> steps;
  for (int at = 0; at < length; at += chunk) {
    std::vector<int32_t>& step = steps.emplace_back();
    for (int i = at; i < std::min(length, at + chunk); ++i) step.push_back((seed * 31 + i * 7) % vocab);
  }
  for (int i = 0; i < 4; ++i) steps.push_back({(seed * 13 + i * 5) % vocab});
  return steps;
}

// 16 sequences of different lengths in one decoder (every pass a GEMM of up to 16 x chunk rows,
// where OpenBLAS rounds rows of 13 or more unlike alone), each sequence's logits after each of
// its passes against the same sequence alone in a one-sequence decoder: bit for bit equal.
TEST(Decoder, BatchedLogitsAreAloneLogits) {
  auto backend = make_cpu_backend();
  ModelConfig gpt2 = testing::tiny_gpt2(), llama = testing::tiny_llama();
  for (ModelConfig* c : {&gpt2, &llama}) c->n_embd = 64, c->n_positions = 48, c->vocab_size = 100;
  llama.intermediate_size = 96;
  for (const ModelConfig& config : {gpt2, llama}) {
    const std::unique_ptr<ModelLayout> layout = make_model_layout(config);
    WholeWeights weights(*layout);
    const int slots = 16, positions = 40, V = config.vocab_size;
    std::vector<std::vector<std::vector<int32_t>>> scripts;  // [slot][pass] tokens
    std::vector<std::vector<std::vector<float>>> alone;      // [slot][pass] logits
    for (int s = 0; s < slots; ++s) {
      const std::unique_ptr<Decoder> one = make_decoder(*layout, *backend, weights, positions, 1);
      ASSERT_TRUE(one->batch_invariant());
      scripts.push_back(script(1 + (s * 5) % 23, one->chunk(), s, V));
      for (const std::vector<int32_t>& step : scripts.back()) {
        const float* logits = one->forward({{0, int(step.size())}}, step);
        alone.resize(size_t(slots));
        alone[size_t(s)].emplace_back(logits, logits + V);
      }
    }
    const std::unique_ptr<Decoder> all = make_decoder(*layout, *backend, weights, positions, slots);
    std::vector<size_t> next(size_t(slots), 0);
    for (bool more = true; more;) {
      std::vector<DecoderSegment> segments;
      std::vector<int32_t> tokens;
      for (int s = 0; s < slots; ++s) {
        if (next[size_t(s)] == scripts[size_t(s)].size()) continue;
        const std::vector<int32_t>& step = scripts[size_t(s)][next[size_t(s)]];
        segments.push_back({s, int(step.size())});
        tokens.insert(tokens.end(), step.begin(), step.end());
      }
      more = !segments.empty();
      if (!more) break;
      const float* logits = all->forward(segments, tokens);
      for (size_t i = 0; i < segments.size(); ++i) {
        const int s = segments[i].slot;
        const std::vector<float>& want = alone[size_t(s)][next[size_t(s)]];
        EXPECT_EQ(std::memcmp(logits + i * size_t(V), want.data(), want.size() * sizeof(float)), 0)
            << config.model_type << ": sequence " << s << "'s pass " << next[size_t(s)] << " beside "
            << segments.size() - 1 << " others";
        ++next[size_t(s)];
      }
    }
  }
}

std::vector<std::vector<int32_t>> prompts() {
  return {{3, 4, 5, 6, 7, 8, 9}, {11}, {2, 30, 2}, {5, 5, 5, 5, 5}, {20, 21}};
}

StopRule stop_rule() {
  StopRule stop;
  stop.eos = {0, 1, 2, 3, 4};
  stop.max_new_tokens = 9;
  return stop;
}

// What the stand-in model continues each prompt with, greedily, worked out without a decoder.
std::vector<std::vector<int32_t>> expected() {
  std::vector<std::vector<int32_t>> out;
  for (std::vector<int32_t> seq : prompts()) {
    std::vector<int32_t>& generated = out.emplace_back();
    while (true) {
      uint64_t h = 1469598103934665603ull;
      for (int32_t t : seq) h = (h ^ uint64_t(t + 1)) * 1099511628211ull;
      generated.push_back(int32_t(h % kVocab));
      seq.push_back(generated.back());
      if (stop_rule().eos.count(generated.back()) || generated.size() == 9) break;
    }
  }
  return out;
}

// Each prompt alone, one slot, no other rank.
std::vector<std::vector<int32_t>> alone(Backend& backend, int chunk) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts()) {
    HashDecoder decoder(backend, chunk, 1, 32);
    GenerationStats stats;
    out.push_back(generate_continuations(decoder, {p}, SamplingParams{}, 1, stop_rule(), kVocab, stats).at(0));
  }
  return out;
}

TEST(GenerationLoop, EachPromptAloneAsTheModelSays) {
  auto backend = make_cpu_backend();
  const auto want = expected();
  ASSERT_TRUE(std::any_of(want.begin(), want.end(), [](const auto& g) { return g.size() < 9; })) << "no EOS stop";
  for (int chunk : {1, 3}) EXPECT_EQ(alone(*backend, chunk), want) << "chunk " << chunk;
}

TEST(GenerationLoop, BatchedAsAlone) {
  auto backend = make_cpu_backend();
  const auto want = expected();
  for (int chunk : {1, 3}) {
    for (int slots : {2, 3, 5}) {
      HashDecoder decoder(*backend, chunk, slots, 32);
      GenerationStats stats;
      EXPECT_EQ(generate_continuations(decoder, prompts(), SamplingParams{}, 1, stop_rule(), kVocab, stats), want)
          << "chunk " << chunk << ", " << slots << " slots";
      EXPECT_EQ(stats.prompt_tokens, 18u);
      EXPECT_EQ(stats.idle_passes, 0u);
      // The first pass reads the first chunk of each place's prompt, all of them together.
      std::vector<std::pair<int, int>> first, want_first;
      for (const DecoderSegment& s : decoder.passes.at(0)) first.emplace_back(s.slot, s.tokens);
      for (int slot = 0; slot < slots; ++slot) {
        want_first.emplace_back(slot, std::min(chunk, int(prompts()[size_t(slot)].size())));
      }
      EXPECT_EQ(first, want_first) << "chunk " << chunk << ", " << slots << " slots";
    }
  }
}

// With chunk 3 and 2 places, the 7-token prompt reads in beside the others' decoding: a pass
// holds its chunk and the other place's next token.
TEST(GenerationLoop, PromptChunksBesideDecoding) {
  auto backend = make_cpu_backend();
  HashDecoder decoder(*backend, 3, 2, 32);
  GenerationStats stats;
  EXPECT_EQ(generate_continuations(decoder, {prompts()[1], prompts()[0]}, SamplingParams{}, 1, stop_rule(), kVocab,
                                   stats),
            (std::vector<std::vector<int32_t>>{expected()[1], expected()[0]}));
  // {11} reads in and then decodes beside the 7 tokens' chunks of 3, 3 and 1.
  ASSERT_GE(expected()[1].size(), 3u) << "the 1-token prompt must still decode in the third pass";
  ASSERT_GE(decoder.passes.size(), 3u);
  using Pass = std::vector<std::pair<int, int>>;
  std::vector<Pass> got;
  for (size_t i = 0; i < 3; ++i) {
    got.emplace_back();
    for (const DecoderSegment& s : decoder.passes[i]) got.back().emplace_back(s.slot, s.tokens);
  }
  EXPECT_EQ(got, (std::vector<Pass>{{{0, 1}, {1, 3}}, {{0, 1}, {1, 3}}, {{0, 1}, {1, 1}}}));
  EXPECT_EQ(stats.prefill_passes, 3u);
}

TEST(GenerationLoop, IdlePassesWhileOtherRanksWork) {
  auto backend = make_cpu_backend();
  const auto want = expected();
  HashDecoder decoder(*backend, 3, 2, 32);
  // The other ranks have work for 200 rounds: this one, done sooner, runs idle passes until then.
  int round = 0;
  std::vector<bool> ends;
  PassSync sync{[&](bool mine) { return mine || round++ < 200; }, [&](bool another) { ends.push_back(another); }};
  GenerationStats stats;
  EXPECT_EQ(generate_continuations(decoder, prompts(), SamplingParams{}, 1, stop_rule(), kVocab, stats, &sync), want);
  const size_t passes = stats.prefill_passes + stats.decode_passes + stats.idle_passes;
  EXPECT_EQ(size_t(decoder.runs), passes);
  EXPECT_GT(stats.idle_passes, 0u);
  ASSERT_EQ(ends.size(), passes);  // end_pass after every pass, `another` on all but the last
  EXPECT_FALSE(ends.back());
  EXPECT_EQ(std::count(ends.begin(), ends.end(), true), long(passes) - 1);

  // No rank with work: no pass at all.
  HashDecoder idle(*backend, 3, 1, 32);
  ends.clear();
  PassSync none{[](bool mine) { return mine; }, [&](bool another) { ends.push_back(another); }};
  EXPECT_TRUE(generate_continuations(idle, {}, SamplingParams{}, 1, stop_rule(), kVocab, stats, &none).empty());
  EXPECT_EQ(idle.runs, 0);
  EXPECT_TRUE(ends.empty());
}

}  // namespace
}  // namespace zt
