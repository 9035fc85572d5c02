#include "model/decoder.h"

#include <algorithm>

#include "core/error.h"
#include "model/gpt2_layout.h"
#include "model/llama_block.h"
#include "model/llama_layout.h"
#include "model/rope.h"

namespace zt {

Decoder::Decoder(Backend& backend, int vocab_size, int max_positions, int chunk)
    : backend_(backend), max_positions_(max_positions), chunk_(chunk) {
  tokens_ = DeviceArray<int32_t>(backend, size_t(chunk));
  tokens_staging_ = DeviceArray<int32_t>(backend, size_t(chunk), Pool::kPinned);
  logits_ = DeviceArray<float>(backend, size_t(vocab_size));
  logits_host_ = DeviceArray<float>(backend, size_t(vocab_size), Pool::kPinned);
}

const float* Decoder::append(const std::vector<int32_t>& tokens) {
  ZT_CHECK(!tokens.empty(), "append of no tokens");
  ZT_USAGE_CHECK(position_ + int64_t(tokens.size()) <= max_positions_, "the sequence would pass ", max_positions_,
                 " tokens (the model's max_position_embeddings, or --max_length)");
  Stream& compute = backend_.compute_stream();
  for (size_t done = 0; done < tokens.size();) {
    const int n = int(std::min<size_t>(size_t(chunk_), tokens.size() - done));
    backend_.synchronize(compute);  // the previous chunk's upload has read the staging
    std::copy(tokens.begin() + long(done), tokens.begin() + long(done) + n, tokens_staging_.data());
    backend_.copy_async(tokens_.data(), tokens_staging_.data(), size_t(n) * sizeof(int32_t), compute);
    run(n);
    position_ += n;
    done += size_t(n);
  }
  backend_.copy_async(logits_host_.data(), logits_.data(), logits_.bytes(), compute);
  backend_.synchronize(compute);
  return logits_host_.data();
}

namespace {

// The Llama family: each block through llama_block_forward, its keys and values written straight
// into the cache rows of their positions, attention over the cache.
class LlamaDecoder final : public Decoder {
 public:
  static constexpr int kChunk = 64;  // prompt tokens per run: bounds the attention scratch

  LlamaDecoder(const LlamaLayout& layout, Backend& backend, const float* weights, int max_positions)
      : Decoder(backend, layout.config().vocab_size, max_positions, std::min(kChunk, max_positions)),
        layout_(layout), cfg_(layout.config()), weights_(weights) {
    const size_t n = size_t(chunk_), C = size_t(cfg_.n_embd), I = size_t(cfg_.intermediate_size);
    const size_t q = size_t(cfg_.n_head) * size_t(cfg_.head_size());
    kv_dim_ = size_t(cfg_.n_kv_head) * size_t(cfg_.head_size());
    const size_t L = size_t(cfg_.n_layer), P = size_t(max_positions);
    k_cache_ = DeviceArray<float>(backend, L * P * kv_dim_);
    v_cache_ = DeviceArray<float>(backend, L * P * kv_dim_);
    x_ = DeviceArray<float>(backend, n * C);
    acts_ = DeviceArray<float>(backend, n * (3 * C + 2 * q + 3 * I + 2) + size_t(cfg_.n_head) * n * P);
    lnf_ = DeviceArray<float>(backend, C + 1);
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
  void run(int n) override {
    KernelOps<float>& ops = backend_.ops();
    const size_t C = size_t(cfg_.n_embd), P = size_t(max_positions_);
    const float* emb = weights_ + layout_.unit_offset(layout_.embedding_unit());
    ops.embedding_forward(x_.data(), tokens_.data(), emb, nullptr, 1, n, int(C));
    for (int l = 0; l < cfg_.n_layer; ++l) {
      LlamaBlockActs<float> a = acts(n);
      float* k_all = k_cache_.data() + size_t(l) * P * kv_dim_;
      float* v_all = v_cache_.data() + size_t(l) * P * kv_dim_;
      a.k = k_all + size_t(position_) * kv_dim_;
      a.v = v_all + size_t(position_) * kv_dim_;
      a.k_all = k_all;
      a.v_all = v_all;
      const float* w = weights_ + layout_.unit_offset(layout_.block_unit(l));
      // The block's output overwrites its input: x is read only before res2 is written.
      llama_block_forward(ops, cfg_, layout_.block(), w, x_.data(), x_.data(), a, 1, n, position_, rope_.data(),
                          rope_.data() + half_);
    }
    const float* wf = weights_ + layout_.unit_offset(layout_.final_norm_unit());
    ops.rmsnorm_forward(lnf_.data(), lnf_.data() + C, x_.data() + size_t(n - 1) * C, wf, 1, int(C),
                        cfg_.layer_norm_epsilon);
    const float* head = weights_ + layout_.unit_offset(layout_.lm_head_unit());
    ops.linear_forward(logits_.data(), lnf_.data(), head, nullptr, 1, int(C), cfg_.vocab_size);
  }

  LlamaBlockActs<float> acts(int n) {
    float* p = acts_.data();
    const size_t att = size_t(cfg_.n_head) * size_t(n) * size_t(position_ + n);
    return carve_llama_block_acts(p, p, cfg_, size_t(n), att, false);
  }

  const LlamaLayout& layout_;
  const ModelConfig& cfg_;
  const float* weights_;
  size_t kv_dim_ = 0, half_ = 0;
  DeviceArray<float> k_cache_, v_cache_, x_, acts_, lnf_, rope_;
};

// GPT-2: one token per run (its fused q|k|v rows make a single token's key and value contiguous,
// so they copy straight into the cache); attention over the cache with as many kv heads as heads.
class Gpt2Decoder final : public Decoder {
 public:
  Gpt2Decoder(const Gpt2Layout& layout, Backend& backend, const float* weights, int max_positions)
      : Decoder(backend, layout.config().vocab_size, max_positions, 1), layout_(layout), cfg_(layout.config()),
        weights_(weights) {
    const size_t C = size_t(cfg_.n_embd), L = size_t(cfg_.n_layer), P = size_t(max_positions);
    k_cache_ = DeviceArray<float>(backend, L * P * C);
    v_cache_ = DeviceArray<float>(backend, L * P * C);
    x_ = DeviceArray<float>(backend, C);
    res_ = DeviceArray<float>(backend, C);
    ln_ = DeviceArray<float>(backend, C + 2);
    qkv_ = DeviceArray<float>(backend, 3 * C);
    atty_ = DeviceArray<float>(backend, C);
    fc_ = DeviceArray<float>(backend, 8 * C);
    att_ = DeviceArray<float>(backend, size_t(cfg_.n_head) * P);
  }

 private:
  void run(int) override {
    KernelOps<float>& ops = backend_.ops();
    Stream& compute = backend_.compute_stream();
    const int C = cfg_.n_embd, H = cfg_.n_head, hs = cfg_.head_size();
    const size_t P = size_t(max_positions_), pos = size_t(position_);
    const float eps = float(cfg_.layer_norm_epsilon);
    float *x = x_.data(), *res = res_.data(), *ln = ln_.data(), *qkv = qkv_.data(), *fc = fc_.data();
    const float* emb = weights_ + layout_.unit_offset(layout_.embedding_unit());
    ops.embedding_forward(x, tokens_.data(), emb, emb + layout_.wpe_offset() + pos * size_t(C), 1, 1, C);
    const BlockOffsets& o = layout_.block();
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const float* w = weights_ + layout_.unit_offset(layout_.block_unit(l));
      float* k_all = k_cache_.data() + size_t(l) * P * size_t(C);
      float* v_all = v_cache_.data() + size_t(l) * P * size_t(C);
      ops.layernorm_forward(ln, ln + C, ln + C + 1, x, w + o.ln1_w, w + o.ln1_b, 1, C, eps);
      ops.matmul_forward(qkv, ln, w + o.attn_w, w + o.attn_b, 1, C, 3 * C);
      backend_.copy_async(k_all + pos * size_t(C), qkv + C, size_t(C) * sizeof(float), compute);
      backend_.copy_async(v_all + pos * size_t(C), qkv + 2 * C, size_t(C) * sizeof(float), compute);
      ops.gqa_attention_forward(atty_.data(), att_.data(), qkv, k_all, v_all, 1, 1, position_ + 1, H, H, hs);
      ops.matmul_forward(res, atty_.data(), w + o.attn_proj_w, w + o.attn_proj_b, 1, C, C);
      ops.accumulate(res, x, size_t(C));
      ops.layernorm_forward(ln, ln + C, ln + C + 1, res, w + o.ln2_w, w + o.ln2_b, 1, C, eps);
      ops.matmul_forward(fc, ln, w + o.fc_w, w + o.fc_b, 1, C, 4 * C);
      ops.gelu_forward(fc + 4 * C, fc, size_t(4 * C));
      ops.matmul_forward(x, fc + 4 * C, w + o.fc_proj_w, w + o.fc_proj_b, 1, 4 * C, C);
      ops.accumulate(x, res, size_t(C));
    }
    const float* wf = weights_ + layout_.unit_offset(layout_.final_norm_unit());
    ops.layernorm_forward(ln, ln + C, ln + C + 1, x, wf, wf + layout_.lnf_bias_offset(), 1, C, eps);
    ops.linear_forward(logits_.data(), ln, emb, nullptr, 1, C, cfg_.vocab_size);  // tied lm_head
  }

  const Gpt2Layout& layout_;
  const ModelConfig& cfg_;
  const float* weights_;
  DeviceArray<float> k_cache_, v_cache_, x_, res_, ln_, qkv_, atty_, fc_, att_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const ModelLayout& layout, Backend& backend, const float* weights,
                                      int max_positions) {
  ZT_USAGE_CHECK(max_positions >= 1 && max_positions <= layout.config().n_positions, "a sequence of ", max_positions,
                 " tokens does not fit the model's ", layout.config().n_positions, " positions");
  if (const auto* llama = dynamic_cast<const LlamaLayout*>(&layout)) {
    return std::make_unique<LlamaDecoder>(*llama, backend, weights, max_positions);
  }
  const auto* gpt2 = dynamic_cast<const Gpt2Layout*>(&layout);
  ZT_CHECK(gpt2 != nullptr, "no decoder for ", layout.config().model_type);
  return std::make_unique<Gpt2Decoder>(*gpt2, backend, weights, max_positions);
}

}  // namespace zt
