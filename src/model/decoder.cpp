#include "model/decoder.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/gpt2_layout.h"
#include "model/llama_block.h"
#include "model/llama_layout.h"
#include "model/rope.h"

namespace zt {

Decoder::Decoder(Backend& backend, int vocab_size, int max_positions, int chunk, int slots, bool batch_invariant)
    : backend_(backend), max_positions_(max_positions), chunk_(chunk), positions_(size_t(slots), 0),
      vocab_size_(vocab_size) {
  ZT_USAGE_CHECK(slots >= 1, "a decoder needs at least 1 sequence, got ", slots);
  batch_invariant_ = batch_invariant && backend.ops().set_batch_invariant(true);
  const size_t tokens = size_t(chunk) * size_t(slots), rows = size_t(slots);
  tokens_ = DeviceArray<int32_t>(backend, tokens);
  tokens_staging_ = DeviceArray<int32_t>(backend, tokens, Pool::kPinned);
  logits_ = DeviceArray<float>(backend, rows * size_t(vocab_size));
  logits_host_ = DeviceArray<float>(backend, rows * size_t(vocab_size), Pool::kPinned);
}

Decoder::~Decoder() { backend_.ops().set_batch_invariant(false); }

const float* Decoder::forward(const std::vector<DecoderSegment>& segments, const std::vector<int32_t>& tokens) {
  size_t total = 0;
  std::set<int> seen;
  for (const DecoderSegment& s : segments) {
    ZT_CHECK(s.slot >= 0 && s.slot < slots(), "slot ", s.slot, " of ", slots());
    ZT_CHECK(seen.insert(s.slot).second, "a pass names sequence ", s.slot, " twice");
    ZT_CHECK(s.tokens >= 1 && s.tokens <= chunk_, "a segment of ", s.tokens, " tokens (at most ", chunk_, ")");
    ZT_USAGE_CHECK(positions_[size_t(s.slot)] + int64_t(s.tokens) <= max_positions_, "the sequence would pass ",
                   max_positions_, " tokens (the model's max_position_embeddings, or --max_length)");
    total += size_t(s.tokens);
  }
  ZT_CHECK(!segments.empty() && total == tokens.size(), "a pass of ", tokens.size(), " tokens for segments of ",
           total);
  Stream& compute = backend_.compute_stream();
  backend_.synchronize(compute);  // the previous pass has read the staging
  std::copy(tokens.begin(), tokens.end(), tokens_staging_.data());
  backend_.copy_async(tokens_.data(), tokens_staging_.data(), total * sizeof(int32_t), compute);
  run(segments);
  for (const DecoderSegment& s : segments) positions_[size_t(s.slot)] += s.tokens;
  backend_.copy_async(logits_host_.data(), logits_.data(), segments.size() * size_t(vocab_size_) * sizeof(float),
                      compute);
  backend_.synchronize(compute);
  return logits_host_.data();
}

namespace {

// Tokens of one sequence a pass, for both families (a prompt runs in chunks of this many): it
// bounds the activations and the attention scratch.
int prompt_chunk(int max_positions) { return std::min(64, max_positions); }

// The Llama family: each block through llama_block_decode over the pass's segments, their keys
// and values written straight into the cache rows of their positions, attention over the cache.
class LlamaDecoder final : public Decoder {
 public:
  LlamaDecoder(const LlamaLayout& layout, Backend& backend, ParamSource<float>& params, int max_positions, int slots,
               bool batch_invariant)
      : Decoder(backend, layout.config().vocab_size, max_positions, prompt_chunk(max_positions), slots,
                batch_invariant),
        layout_(layout), cfg_(layout.config()), params_(params) {
    const size_t rows = size_t(chunk_) * size_t(slots), C = size_t(cfg_.n_embd), I = size_t(cfg_.intermediate_size);
    const size_t q = size_t(cfg_.n_head) * size_t(cfg_.head_size());
    kv_dim_ = size_t(cfg_.n_kv_head) * size_t(cfg_.head_size());
    const size_t L = size_t(cfg_.n_layer), P = size_t(max_positions);
    k_cache_ = DeviceArray<float>(backend, size_t(slots) * L * P * kv_dim_);
    v_cache_ = DeviceArray<float>(backend, size_t(slots) * L * P * kv_dim_);
    x_ = DeviceArray<float>(backend, rows * C);
    // The segments' attention runs one after another: a chunk's rows attend to P positions at most.
    acts_ = DeviceArray<float>(backend, rows * (3 * C + 2 * q + 3 * I + 2) + att_elems());
    lnf_ = DeviceArray<float>(backend, size_t(slots) * (C + 1));
    std::vector<double> cos, sin;
    rope_tables(cfg_, max_positions, cos, sin);
    rope_ = DeviceArray<float>(backend, 2 * cos.size());
    DeviceArray<float> staging(backend, 2 * cos.size(), Pool::kPinned);
    std::copy(cos.begin(), cos.end(), staging.data());
    std::copy(sin.begin(), sin.end(), staging.data() + cos.size());
    backend.copy_async(rope_.data(), staging.data(), staging.bytes(), backend.compute_stream());
    backend.synchronize(backend.compute_stream());
    half_ = cos.size();
  }

 private:
  size_t att_elems() const { return size_t(cfg_.n_head) * size_t(chunk_) * size_t(max_positions_); }
  float* k_all(int slot, int layer) { return k_cache_.data() + cache_offset(slot, layer); }
  float* v_all(int slot, int layer) { return v_cache_.data() + cache_offset(slot, layer); }
  size_t cache_offset(int slot, int layer) const {
    return (size_t(slot) * size_t(cfg_.n_layer) + size_t(layer)) * size_t(max_positions_) * kv_dim_;
  }

  void run(const std::vector<DecoderSegment>& segments) override {
    KernelOps<float>& ops = backend_.ops();
    int rows = 0;
    for (const DecoderSegment& s : segments) rows += s.tokens;
    embed(rows);
    std::vector<LlamaDecodeSegment<float>> at(segments.size());
    for (int l = 0; l < cfg_.n_layer; ++l) {
      for (size_t i = 0; i < segments.size(); ++i) {
        const int slot = segments[i].slot;
        at[i] = {positions_[size_t(slot)], segments[i].tokens, k_all(slot, l), v_all(slot, l)};
      }
      float* p = acts_.data();
      const LlamaBlockActs<float> a = carve_llama_block_acts(p, p, cfg_, size_t(rows), att_elems(), false);
      const float* w = params_.acquire_weights(layout_.block_unit(l));
      // The block's output overwrites its input: x is read only before res2 is written.
      llama_block_decode(ops, cfg_, layout_.block(), w, x_.data(), x_.data(), a, at, rope_.data(),
                         rope_.data() + half_);
      params_.release_weights(layout_.block_unit(l));
    }
    head(segments);
  }

  // x's first n rows: the embeddings of tokens_'s first n.
  void embed(int n) {
    const int unit = layout_.embedding_unit();
    backend_.ops().embedding_forward(x_.data(), tokens_.data(), params_.acquire_weights(unit), nullptr, 1, n,
                                     cfg_.n_embd);
    params_.release_weights(unit);
  }

  // The final norm of each segment's last row of x, then the lm_head over them: logits_'s rows.
  void head(const std::vector<DecoderSegment>& segments) {
    KernelOps<float>& ops = backend_.ops();
    const size_t C = size_t(cfg_.n_embd), n = segments.size();
    const int norm = layout_.final_norm_unit(), lm_head = layout_.lm_head_unit();
    const float* wn = params_.acquire_weights(norm);
    size_t last = 0;
    for (size_t i = 0; i < n; ++i) {
      last += size_t(segments[i].tokens);
      ops.rmsnorm_forward(lnf_.data() + i * C, lnf_.data() + n * C + i, x_.data() + (last - 1) * C, wn, 1, int(C),
                          cfg_.layer_norm_epsilon);
    }
    params_.release_weights(norm);
    ops.linear_forward(logits_.data(), lnf_.data(), params_.acquire_weights(lm_head), nullptr, int(n), int(C),
                       cfg_.vocab_size);
    params_.release_weights(lm_head);
  }

  const LlamaLayout& layout_;
  const ModelConfig& cfg_;
  ParamSource<float>& params_;
  size_t kv_dim_ = 0, half_ = 0;
  DeviceArray<float> k_cache_, v_cache_, x_, acts_, lnf_, rope_;
};

// GPT-2: up to prompt_chunk() tokens of each segment's sequence a pass. The fused q|k|v projection runs
// over all rows at once; each segment's keys and values are then copied row by row out of it into
// the cache rows of their positions and its queries into a contiguous block, and its rows attend
// causally to its own cache with as many kv heads as heads. The final norm and the lm_head run on
// each segment's last row only.
class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const Gpt2Layout& layout, Backend& backend, ParamSource<float>& params, int max_positions, int slots,
              bool batch_invariant)
      : Decoder(backend, layout.config().vocab_size, max_positions, prompt_chunk(max_positions), slots,
                batch_invariant),
        layout_(layout), cfg_(layout.config()), params_(params) {
    const size_t C = size_t(cfg_.n_embd), L = size_t(cfg_.n_layer), P = size_t(max_positions), n = size_t(slots);
    const size_t rows = size_t(chunk_) * n;
    k_cache_ = DeviceArray<float>(backend, n * L * P * C);
    v_cache_ = DeviceArray<float>(backend, n * L * P * C);
    x_ = DeviceArray<float>(backend, rows * C);
    res_ = DeviceArray<float>(backend, rows * C);
    ln_ = DeviceArray<float>(backend, rows * (C + 2));
    qkv_ = DeviceArray<float>(backend, rows * 3 * C);
    q_ = DeviceArray<float>(backend, size_t(chunk_) * C);
    atty_ = DeviceArray<float>(backend, rows * C);
    fc_ = DeviceArray<float>(backend, rows * 8 * C);
    att_ = DeviceArray<float>(backend, size_t(cfg_.n_head) * size_t(chunk_) * P);
  }

 private:
  void run(const std::vector<DecoderSegment>& segments) override {
    KernelOps<float>& ops = backend_.ops();
    int n = 0;
    for (const DecoderSegment& s : segments) n += s.tokens;
    const int C = cfg_.n_embd;
    const size_t c = size_t(C);
    const float eps = float(cfg_.layer_norm_epsilon);
    float *x = x_.data(), *res = res_.data(), *qkv = qkv_.data(), *fc = fc_.data();
    float *ln = ln_.data(), *mean = ln + size_t(n) * c, *rstd = mean + n;
    const int wte = layout_.embedding_unit();  // wpe in the same unit; the lm_head tied to wte
    const float* emb = params_.acquire_weights(wte);
    size_t row = 0;
    for (const DecoderSegment& s : segments) {  // each segment's rows their own positions' embeddings
      const size_t pos = size_t(positions_[size_t(s.slot)]);
      ops.embedding_forward(x + row * c, tokens_.data() + row, emb, emb + layout_.wpe_offset() + pos * c, 1, s.tokens,
                            C);
      row += size_t(s.tokens);
    }
    params_.release_weights(wte);
    const BlockOffsets& o = layout_.block();
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const float* w = params_.acquire_weights(layout_.block_unit(l));
      ops.layernorm_forward(ln, mean, rstd, x, w + o.ln1_w, w + o.ln1_b, n, C, eps);
      ops.matmul_forward(qkv, ln, w + o.attn_w, w + o.attn_b, n, C, 3 * C);
      attend(segments, l);
      ops.matmul_forward(res, atty_.data(), w + o.attn_proj_w, w + o.attn_proj_b, n, C, C);
      ops.accumulate(res, x, size_t(n) * c);
      ops.layernorm_forward(ln, mean, rstd, res, w + o.ln2_w, w + o.ln2_b, n, C, eps);
      ops.matmul_forward(fc, ln, w + o.fc_w, w + o.fc_b, n, C, 4 * C);
      ops.gelu_forward(fc + size_t(n) * 4 * c, fc, size_t(n) * 4 * c);
      ops.matmul_forward(x, fc + size_t(n) * 4 * c, w + o.fc_proj_w, w + o.fc_proj_b, n, 4 * C, C);
      ops.accumulate(x, res, size_t(n) * c);
      params_.release_weights(layout_.block_unit(l));
    }
    head(segments);
  }

  // Layer l's attention: each segment's keys and values into its cache, its queries into q_, and
  // its rows of atty_ from its cache.
  void attend(const std::vector<DecoderSegment>& segments, int l) {
    Stream& compute = backend_.compute_stream();
    const size_t c = size_t(cfg_.n_embd), P = size_t(max_positions_), bytes = c * sizeof(float);
    size_t row = 0;
    for (const DecoderSegment& s : segments) {
      const size_t pos = size_t(positions_[size_t(s.slot)]);
      const size_t cache = (size_t(s.slot) * size_t(cfg_.n_layer) + size_t(l)) * P * c;
      float *k_all = k_cache_.data() + cache, *v_all = v_cache_.data() + cache;
      for (size_t t = 0; t < size_t(s.tokens); ++t) {
        const float* qkv_row = qkv_.data() + (row + t) * 3 * c;
        backend_.copy_async(q_.data() + t * c, qkv_row, bytes, compute);
        backend_.copy_async(k_all + (pos + t) * c, qkv_row + c, bytes, compute);
        backend_.copy_async(v_all + (pos + t) * c, qkv_row + 2 * c, bytes, compute);
      }
      backend_.ops().gqa_attention_forward(atty_.data() + row * c, att_.data(), q_.data(), k_all, v_all, 1, s.tokens,
                                           int(pos) + s.tokens, cfg_.n_head, cfg_.n_head, cfg_.head_size());
      row += size_t(s.tokens);
    }
  }

  // The final norm of each segment's last row of x, then the lm_head over them: logits_'s rows.
  void head(const std::vector<DecoderSegment>& segments) {
    KernelOps<float>& ops = backend_.ops();
    const size_t c = size_t(cfg_.n_embd), n = segments.size();
    float *ln = ln_.data(), *mean = ln + n * c, *rstd = mean + n;
    const int norm = layout_.final_norm_unit();
    const float* wf = params_.acquire_weights(norm);
    size_t last = 0;
    for (size_t i = 0; i < n; ++i) {
      last += size_t(segments[i].tokens);
      ops.layernorm_forward(ln + i * c, mean + i, rstd + i, x_.data() + (last - 1) * c, wf,
                            wf + layout_.lnf_bias_offset(), 1, cfg_.n_embd, float(cfg_.layer_norm_epsilon));
    }
    params_.release_weights(norm);
    const int wte = layout_.embedding_unit();
    ops.linear_forward(logits_.data(), ln, params_.acquire_weights(wte), nullptr, int(n), cfg_.n_embd,
                       cfg_.vocab_size);
    params_.release_weights(wte);
  }

  const Gpt2Layout& layout_;
  const ModelConfig& cfg_;
  ParamSource<float>& params_;
  DeviceArray<float> k_cache_, v_cache_, x_, res_, ln_, qkv_, q_, atty_, fc_, att_;
};

}  // namespace

// Every allocation of Decoder's constructor and the two decoders' above, in elements of 4 bytes.
DecoderMemory decoder_memory(const ModelLayout& layout, int max_positions, int slots) {
  const ModelConfig& cfg = layout.config();
  const size_t P = size_t(max_positions), n = size_t(slots), L = size_t(cfg.n_layer), C = size_t(cfg.n_embd);
  const size_t H = size_t(cfg.n_head);
  const size_t chunk = size_t(prompt_chunk(max_positions)), rows = chunk * n;
  size_t kv = 0, device = 0;
  if (dynamic_cast<const LlamaLayout*>(&layout)) {
    const size_t I = size_t(cfg.intermediate_size), hs = size_t(cfg.head_size());
    kv = 2 * n * L * P * size_t(cfg.n_kv_head) * hs;
    device = rows * C + rows * (3 * C + 2 * H * hs + 3 * I + 2) + H * chunk * P + n * (C + 1) +
             2 * P * rope_inv_freq(cfg).size();
  } else {
    kv = 2 * n * L * P * C;
    device = 2 * rows * C + rows * (C + 2) + 3 * rows * C + chunk * C + rows * C + 8 * rows * C + H * chunk * P;
  }
  const size_t io = chunk * n + n * size_t(cfg.vocab_size);  // tokens, logits
  return {kv * sizeof(float), (device + io) * sizeof(float), io * sizeof(float)};
}

std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, ParamSource<float>& params,
                                      int max_positions, int slots, bool batch_invariant) {
  ZT_USAGE_CHECK(max_positions >= 1 && max_positions <= layout.config().n_positions, "a sequence of ", max_positions,
                 " tokens does not fit the model's ", layout.config().n_positions, " positions");
  if (const auto* llama = dynamic_cast<const LlamaLayout*>(&layout)) {
    return std::make_unique<LlamaDecoder>(*llama, backend, params, max_positions, slots, batch_invariant);
  }
  const auto* gpt2 = dynamic_cast<const Gpt2Layout*>(&layout);
  ZT_CHECK(gpt2 != nullptr, "no decoder for ", layout.config().model_type);
  return std::make_unique<Gpt2Decoder>(*gpt2, backend, params, max_positions, slots, batch_invariant);
}

}  // namespace zt
