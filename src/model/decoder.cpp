#include "model/decoder.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/gpt2_layout.h"
#include "model/llama_block.h"
#include "model/llama_layout.h"
#include "model/rope.h"

namespace zt {

Decoder::Decoder(Backend& backend, int vocab_size, int max_positions, int chunk, int slots)
    : backend_(backend), max_positions_(max_positions), chunk_(chunk), positions_(size_t(slots), 0),
      vocab_size_(vocab_size) {
  ZT_USAGE_CHECK(slots >= 1, "a decoder needs at least 1 sequence, got ", slots);
  const size_t rows = size_t(std::max(chunk, slots));
  tokens_ = DeviceArray<int32_t>(backend, rows);
  tokens_staging_ = DeviceArray<int32_t>(backend, rows, Pool::kPinned);
  logits_ = DeviceArray<float>(backend, rows * size_t(vocab_size));
  logits_host_ = DeviceArray<float>(backend, rows * size_t(vocab_size), Pool::kPinned);
}

void Decoder::upload(const int32_t* tokens, int n) {
  Stream& compute = backend_.compute_stream();
  backend_.synchronize(compute);  // the previous upload has read the staging
  std::copy(tokens, tokens + n, tokens_staging_.data());
  backend_.copy_async(tokens_.data(), tokens_staging_.data(), size_t(n) * sizeof(int32_t), compute);
}

const float* Decoder::download(int rows) {
  Stream& compute = backend_.compute_stream();
  backend_.copy_async(logits_host_.data(), logits_.data(), size_t(rows) * size_t(vocab_size_) * sizeof(float),
                      compute);
  backend_.synchronize(compute);
  return logits_host_.data();
}

const float* Decoder::append(const std::vector<int32_t>& tokens, int slot) {
  ZT_CHECK(!tokens.empty(), "append of no tokens");
  ZT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " of ", slots());
  int& position = positions_[size_t(slot)];
  ZT_USAGE_CHECK(position + int64_t(tokens.size()) <= max_positions_, "the sequence would pass ", max_positions_,
                 " tokens (the model's max_position_embeddings, or --max_length)");
  for (size_t done = 0; done < tokens.size();) {
    const int n = int(std::min<size_t>(size_t(chunk_), tokens.size() - done));
    upload(tokens.data() + done, n);
    run(slot, n);
    position += n;
    done += size_t(n);
  }
  return download(1);
}

const float* Decoder::step(const std::vector<int>& slots, const std::vector<int32_t>& tokens) {
  ZT_CHECK(!tokens.empty() && slots.size() == tokens.size(), "a step of ", tokens.size(), " tokens for ",
           slots.size(), " sequences");
  ZT_CHECK(std::set<int>(slots.begin(), slots.end()).size() == slots.size(), "a step names a sequence twice");
  for (int slot : slots) {
    ZT_CHECK(slot >= 0 && slot < this->slots(), "slot ", slot, " of ", this->slots());
    ZT_USAGE_CHECK(positions_[size_t(slot)] < max_positions_, "the sequence would pass ", max_positions_,
                   " tokens (the model's max_position_embeddings, or --max_length)");
  }
  upload(tokens.data(), int(tokens.size()));
  run_step(slots);
  for (int slot : slots) ++positions_[size_t(slot)];
  return download(int(tokens.size()));
}

namespace {

// The Llama family: each block through llama_block_forward (a prompt) or llama_block_decode (a
// step of several sequences), its keys and values written straight into the cache rows of their
// positions, attention over the cache.
class LlamaDecoder final : public Decoder {
 public:
  static constexpr int kChunk = 64;  // prompt tokens per run: bounds the attention scratch

  LlamaDecoder(const LlamaLayout& layout, Backend& backend, ParamSource<float>& params, int max_positions, int slots)
      : Decoder(backend, layout.config().vocab_size, max_positions, std::min(kChunk, max_positions), slots),
        layout_(layout), cfg_(layout.config()), params_(params) {
    const size_t rows = size_t(std::max(chunk_, slots)), C = size_t(cfg_.n_embd), I = size_t(cfg_.intermediate_size);
    const size_t q = size_t(cfg_.n_head) * size_t(cfg_.head_size());
    kv_dim_ = size_t(cfg_.n_kv_head) * size_t(cfg_.head_size());
    const size_t L = size_t(cfg_.n_layer), P = size_t(max_positions);
    k_cache_ = DeviceArray<float>(backend, size_t(slots) * L * P * kv_dim_);
    v_cache_ = DeviceArray<float>(backend, size_t(slots) * L * P * kv_dim_);
    x_ = DeviceArray<float>(backend, rows * C);
    // A prompt's chunk attends chunk x P; a step's rows attend one at a time, P each.
    acts_ = DeviceArray<float>(backend, rows * (3 * C + 2 * q + 3 * I + 2) + size_t(cfg_.n_head) * size_t(chunk_) * P);
    lnf_ = DeviceArray<float>(backend, rows * (C + 1));
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
  float* k_all(int slot, int layer) { return k_cache_.data() + cache_offset(slot, layer); }
  float* v_all(int slot, int layer) { return v_cache_.data() + cache_offset(slot, layer); }
  size_t cache_offset(int slot, int layer) const {
    return (size_t(slot) * size_t(cfg_.n_layer) + size_t(layer)) * size_t(max_positions_) * kv_dim_;
  }

  void run(int slot, int n) override {
    KernelOps<float>& ops = backend_.ops();
    const int position = positions_[size_t(slot)];
    embed(n);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      LlamaBlockActs<float> a = acts(n, size_t(cfg_.n_head) * size_t(n) * size_t(position + n));
      a.k_all = k_all(slot, l);
      a.v_all = v_all(slot, l);
      a.k = k_all(slot, l) + size_t(position) * kv_dim_;
      a.v = v_all(slot, l) + size_t(position) * kv_dim_;
      const float* w = params_.acquire_weights(layout_.block_unit(l));
      // The block's output overwrites its input: x is read only before res2 is written.
      llama_block_forward(ops, cfg_, layout_.block(), w, x_.data(), x_.data(), a, 1, n, position, rope_.data(),
                          rope_.data() + half_);
      params_.release_weights(layout_.block_unit(l));
    }
    head(x_.data() + size_t(n - 1) * size_t(cfg_.n_embd), 1);
  }

  void run_step(const std::vector<int>& slots) override {
    KernelOps<float>& ops = backend_.ops();
    const int n = int(slots.size());
    embed(n);
    std::vector<LlamaDecodeRow<float>> rows(slots.size());
    for (int l = 0; l < cfg_.n_layer; ++l) {
      for (size_t i = 0; i < slots.size(); ++i) {
        rows[i] = {positions_[size_t(slots[i])], k_all(slots[i], l), v_all(slots[i], l)};
      }
      const LlamaBlockActs<float> a = acts(n, size_t(cfg_.n_head) * size_t(max_positions_));
      const float* w = params_.acquire_weights(layout_.block_unit(l));
      llama_block_decode(ops, cfg_, layout_.block(), w, x_.data(), x_.data(), a, rows, rope_.data(),
                         rope_.data() + half_);
      params_.release_weights(layout_.block_unit(l));
    }
    head(x_.data(), n);
  }

  // x's first n rows: the embeddings of tokens_'s first n.
  void embed(int n) {
    const int unit = layout_.embedding_unit();
    backend_.ops().embedding_forward(x_.data(), tokens_.data(), params_.acquire_weights(unit), nullptr, 1, n,
                                     cfg_.n_embd);
    params_.release_weights(unit);
  }

  // The final norm and the lm_head over `rows` rows of x: logits_'s first rows.
  void head(const float* x, int rows) {
    KernelOps<float>& ops = backend_.ops();
    const size_t C = size_t(cfg_.n_embd);
    const int norm = layout_.final_norm_unit(), lm_head = layout_.lm_head_unit();
    ops.rmsnorm_forward(lnf_.data(), lnf_.data() + size_t(rows) * C, x, params_.acquire_weights(norm), rows, int(C),
                        cfg_.layer_norm_epsilon);
    params_.release_weights(norm);
    ops.linear_forward(logits_.data(), lnf_.data(), params_.acquire_weights(lm_head), nullptr, rows, int(C),
                       cfg_.vocab_size);
    params_.release_weights(lm_head);
  }

  LlamaBlockActs<float> acts(int rows, size_t att) {
    float* p = acts_.data();
    return carve_llama_block_acts(p, p, cfg_, size_t(rows), att, false);
  }

  const LlamaLayout& layout_;
  const ModelConfig& cfg_;
  ParamSource<float>& params_;
  size_t kv_dim_ = 0, half_ = 0;
  DeviceArray<float> k_cache_, v_cache_, x_, acts_, lnf_, rope_;
};

// GPT-2: a prompt one token per run (its fused q|k|v rows make a single token's key and value
// contiguous, so they copy straight into the cache), a step one token of each sequence; attention
// over each sequence's cache with as many kv heads as heads.
class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const Gpt2Layout& layout, Backend& backend, ParamSource<float>& params, int max_positions, int slots)
      : Decoder(backend, layout.config().vocab_size, max_positions, 1, slots), layout_(layout),
        cfg_(layout.config()), params_(params) {
    const size_t C = size_t(cfg_.n_embd), L = size_t(cfg_.n_layer), P = size_t(max_positions), n = size_t(slots);
    k_cache_ = DeviceArray<float>(backend, n * L * P * C);
    v_cache_ = DeviceArray<float>(backend, n * L * P * C);
    x_ = DeviceArray<float>(backend, n * C);
    res_ = DeviceArray<float>(backend, n * C);
    ln_ = DeviceArray<float>(backend, n * (C + 2));
    qkv_ = DeviceArray<float>(backend, n * 3 * C);
    atty_ = DeviceArray<float>(backend, n * C);
    fc_ = DeviceArray<float>(backend, n * 8 * C);
    att_ = DeviceArray<float>(backend, size_t(cfg_.n_head) * P);
  }

 private:
  void run(int slot, int) override { run_step({slot}); }

  void run_step(const std::vector<int>& slots) override {
    KernelOps<float>& ops = backend_.ops();
    Stream& compute = backend_.compute_stream();
    const int C = cfg_.n_embd, H = cfg_.n_head, hs = cfg_.head_size(), n = int(slots.size());
    const size_t P = size_t(max_positions_), c = size_t(C);
    const float eps = float(cfg_.layer_norm_epsilon);
    float *x = x_.data(), *res = res_.data(), *qkv = qkv_.data(), *fc = fc_.data();
    float *ln = ln_.data(), *mean = ln + size_t(n) * c, *rstd = mean + n;
    const int wte = layout_.embedding_unit();  // wpe in the same unit; the lm_head tied to wte
    const float* emb = params_.acquire_weights(wte);
    for (int i = 0; i < n; ++i) {  // each row its own position's embedding
      const size_t pos = size_t(positions_[size_t(slots[size_t(i)])]);
      ops.embedding_forward(x + size_t(i) * c, tokens_.data() + i, emb, emb + layout_.wpe_offset() + pos * c, 1, 1, C);
    }
    params_.release_weights(wte);
    const BlockOffsets& o = layout_.block();
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const float* w = params_.acquire_weights(layout_.block_unit(l));
      ops.layernorm_forward(ln, mean, rstd, x, w + o.ln1_w, w + o.ln1_b, n, C, eps);
      ops.matmul_forward(qkv, ln, w + o.attn_w, w + o.attn_b, n, C, 3 * C);
      for (int i = 0; i < n; ++i) {
        const int slot = slots[size_t(i)];
        const size_t pos = size_t(positions_[size_t(slot)]), cache = (size_t(slot) * cfg_.n_layer + size_t(l)) * P * c;
        float *k_all = k_cache_.data() + cache, *v_all = v_cache_.data() + cache;
        const float* row = qkv + size_t(i) * 3 * c;
        backend_.copy_async(k_all + pos * c, row + c, c * sizeof(float), compute);
        backend_.copy_async(v_all + pos * c, row + 2 * c, c * sizeof(float), compute);
        ops.gqa_attention_forward(atty_.data() + size_t(i) * c, att_.data(), row, k_all, v_all, 1, 1, int(pos) + 1, H,
                                  H, hs);
      }
      ops.matmul_forward(res, atty_.data(), w + o.attn_proj_w, w + o.attn_proj_b, n, C, C);
      ops.accumulate(res, x, size_t(n) * c);
      ops.layernorm_forward(ln, mean, rstd, res, w + o.ln2_w, w + o.ln2_b, n, C, eps);
      ops.matmul_forward(fc, ln, w + o.fc_w, w + o.fc_b, n, C, 4 * C);
      ops.gelu_forward(fc + size_t(n) * 4 * c, fc, size_t(n) * 4 * c);
      ops.matmul_forward(x, fc + size_t(n) * 4 * c, w + o.fc_proj_w, w + o.fc_proj_b, n, 4 * C, C);
      ops.accumulate(x, res, size_t(n) * c);
      params_.release_weights(layout_.block_unit(l));
    }
    const int norm = layout_.final_norm_unit();
    const float* wf = params_.acquire_weights(norm);
    ops.layernorm_forward(ln, mean, rstd, x, wf, wf + layout_.lnf_bias_offset(), n, C, eps);
    params_.release_weights(norm);
    ops.linear_forward(logits_.data(), ln, params_.acquire_weights(wte), nullptr, n, C, cfg_.vocab_size);
    params_.release_weights(wte);
  }

  const Gpt2Layout& layout_;
  const ModelConfig& cfg_;
  ParamSource<float>& params_;
  DeviceArray<float> k_cache_, v_cache_, x_, res_, ln_, qkv_, atty_, fc_, att_;
};

}  // namespace

// Every allocation of Decoder's constructor and the two decoders' above, in elements of 4 bytes.
DecoderMemory decoder_memory(const ModelLayout& layout, int max_positions, int slots) {
  const ModelConfig& cfg = layout.config();
  const size_t P = size_t(max_positions), n = size_t(slots), L = size_t(cfg.n_layer), C = size_t(cfg.n_embd);
  const size_t H = size_t(cfg.n_head);
  size_t chunk = 1, kv = 0, device = 0;
  if (dynamic_cast<const LlamaLayout*>(&layout)) {
    chunk = size_t(std::min(LlamaDecoder::kChunk, max_positions));
    const size_t rows = std::max(chunk, n), I = size_t(cfg.intermediate_size), hs = size_t(cfg.head_size());
    kv = 2 * n * L * P * size_t(cfg.n_kv_head) * hs;
    device = rows * C + rows * (3 * C + 2 * H * hs + 3 * I + 2) + H * chunk * P + rows * (C + 1) +
             2 * P * rope_inv_freq(cfg).size();
  } else {
    kv = 2 * n * L * P * C;
    device = 2 * n * C + n * (C + 2) + 3 * n * C + n * C + 8 * n * C + H * P;
  }
  const size_t rows = std::max(chunk, n), io = rows + rows * size_t(cfg.vocab_size);  // tokens, logits
  return {kv * sizeof(float), (device + io) * sizeof(float), io * sizeof(float)};
}

std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, ParamSource<float>& params,
                                      int max_positions, int slots) {
  ZT_USAGE_CHECK(max_positions >= 1 && max_positions <= layout.config().n_positions, "a sequence of ", max_positions,
                 " tokens does not fit the model's ", layout.config().n_positions, " positions");
  if (const auto* llama = dynamic_cast<const LlamaLayout*>(&layout)) {
    return std::make_unique<LlamaDecoder>(*llama, backend, params, max_positions, slots);
  }
  const auto* gpt2 = dynamic_cast<const Gpt2Layout*>(&layout);
  ZT_CHECK(gpt2 != nullptr, "no decoder for ", layout.config().model_type);
  return std::make_unique<Gpt2Decoder>(*gpt2, backend, params, max_positions, slots);
}

}  // namespace zt
