// The whole GPT-2's gradient against central finite differences in double precision, and
// activation checkpointing against the plain backward.
#include <cstring>

#include "core/error.h"
#include "grad_check.h"
#include "model/causal_lm.h"

namespace zt {
namespace {

// Parameters and gradients in plain flat arrays, as a ZeRO engine would hold them in fp32.
template <typename T>
class FlatParams : public ParamSource<T> {
 public:
  explicit FlatParams(const ModelLayout& layout) : layout_(layout), weights(layout.flat_size()), grads(layout.flat_size(), 0) {}
  const T* acquire_weights(int unit) override { return weights.data() + layout_.unit_offset(unit); }
  void release_weights(int) override {}
  T* grad_accumulator(int unit) override { return grads.data() + layout_.unit_offset(unit); }
  void grads_done(int unit) override { ++done_count; }
  const ModelLayout& layout_;
  std::vector<T> weights, grads;
  int done_count = 0;
};

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_positions = 6;
  c.vocab_size = 11;
  return c;
}

TEST(ModelGradient, MatchesFiniteDifferences) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_config());
  const ModelLayout& layout = *layout_ptr;
  FlatParams<double> params(layout);
  std::vector<float> init(layout.flat_size());
  layout.init(7, init.data(), 0, layout.flat_size());
  // Larger than GPT-2's 0.02 so every path carries signal, and non-trivial layernorm/bias values.
  auto noise = testing::random_vector(layout.flat_size(), 99, 0.3);
  for (size_t i = 0; i < init.size(); ++i) params.weights[i] = init[i] * 10 + noise[i];

  const int B = 2, T = 5;
  std::vector<int32_t> inputs = {1, 3, 5, 7, 9, 2, 2, 4, 10, 0};
  std::vector<int32_t> targets = {3, 5, 7, 9, 1, 2, 4, 10, 0, -1};
  const auto model_ptr = make_causal_lm<double>(layout, *backend, *backend->ops_f64(), B, T, false);
  CausalLM<double>& model = *model_ptr;
  auto loss = [&] {
    model.forward(params, inputs.data(), targets.data(), B, T);
    return model.take_loss();
  };
  loss();
  model.backward(params, 1.0);
  EXPECT_EQ(params.done_count, layout.num_units());
  // Only real parameters (not the zero padding between them) are compared.
  for (const auto& p : layout.params()) {
    std::vector<double> x(params.weights.begin() + p.offset, params.weights.begin() + p.offset + p.numel);
    std::vector<double> g(params.grads.begin() + p.offset, params.grads.begin() + p.offset + p.numel);
    auto write_back_loss = [&] {
      std::copy(x.begin(), x.end(), params.weights.begin() + p.offset);
      return loss();
    };
    testing::expect_gradient_matches(x, g, write_back_loss, p.name.c_str(), 1e-6, 40);
    std::copy(x.begin(), x.end(), params.weights.begin() + p.offset);
  }
}

TEST(ModelGradient, CheckpointingGivesTheSameGradients) {
  auto backend = make_cpu_backend();
  ModelConfig cfg = tiny_config();
  cfg.n_layer = 3;
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(cfg);
  const ModelLayout& layout = *layout_ptr;
  FlatParams<float> plain(layout), recomputed(layout);
  layout.init(3, plain.weights.data(), 0, layout.flat_size());
  recomputed.weights = plain.weights;
  const int B = 2, T = 6;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 5) % cfg.vocab_size;
    targets[i] = (i * 3 + 1) % cfg.vocab_size;
  }
  const auto a_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), B, T, false);
  CausalLM<float>& a = *a_ptr;
  const auto b_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), B, T, true);
  CausalLM<float>& b = *b_ptr;
  EXPECT_LT(b.activation_bytes(), a.activation_bytes());
  a.forward(plain, inputs.data(), targets.data(), B, T);
  double la = a.take_loss();
  b.forward(recomputed, inputs.data(), targets.data(), B, T);
  double lb = b.take_loss();
  EXPECT_EQ(la, lb);
  a.backward(plain, 1.0);
  b.backward(recomputed, 1.0);
  // The recompute runs the same kernels on the same inputs: bit-identical gradients.
  ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
  EXPECT_EQ(0, std::memcmp(plain.grads.data(), recomputed.grads.data(), plain.grads.size() * sizeof(float)));
}

TEST(ModelGradient, FloatModelAgreesWithDouble) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_config());
  const ModelLayout& layout = *layout_ptr;
  FlatParams<float> pf(layout);
  FlatParams<double> pd(layout);
  layout.init(5, pf.weights.data(), 0, layout.flat_size());
  std::copy(pf.weights.begin(), pf.weights.end(), pd.weights.begin());
  const int B = 1, T = 6;
  std::vector<int32_t> inputs = {1, 2, 3, 4, 5, 6}, targets = {2, 3, 4, 5, 6, 7};
  const auto mf_ptr = make_causal_lm<float>(layout, *backend, backend->ops(), B, T, false);
  CausalLM<float>& mf = *mf_ptr;
  const auto md_ptr = make_causal_lm<double>(layout, *backend, *backend->ops_f64(), B, T, false);
  CausalLM<double>& md = *md_ptr;
  mf.forward(pf, inputs.data(), targets.data(), B, T);
  double lf = mf.take_loss();
  md.forward(pd, inputs.data(), targets.data(), B, T);
  double ld = md.take_loss();
  EXPECT_NEAR(lf, ld, 1e-5);
  EXPECT_NEAR(ld, std::log(11.0), 0.05);  // an untrained model predicts roughly uniformly
  mf.backward(pf, 1.0);
  md.backward(pd, 1.0);
  double err = 0, ref = 0;
  for (size_t i = 0; i < pd.grads.size(); ++i) {
    err += (pf.grads[i] - pd.grads[i]) * (pf.grads[i] - pd.grads[i]);
    ref += pd.grads[i] * pd.grads[i];
  }
  EXPECT_LT(err / ref, 1e-9);
}

TEST(Gpt2Layout, HfNamesShapesAndCount) {
  ModelConfig c;  // GPT-2 small
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(c);
  const ModelLayout& layout = *layout_ptr;
  EXPECT_EQ(layout.num_params(), 124439808u);  // HF's GPT2LMHeadModel without the tied lm_head copy
  const ParamInfo& attn = layout.find("transformer.h.11.attn.c_attn.weight");
  EXPECT_EQ(attn.shape, (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(layout.find("transformer.wte.weight").shape, (std::vector<int64_t>{50257, 768}));
  EXPECT_EQ(layout.find("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(layout.params().size(), 2u + 12u * 12u + 2u);
  for (const auto& p : layout.params()) EXPECT_EQ(p.offset % kParamAlignment, 0u) << p.name;
  EXPECT_THROW(layout.find("lm_head.weight"), UsageError);
}

TEST(Gpt2Layout, InitialisationIsSliceable) {
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(tiny_config());
  const ModelLayout& layout = *layout_ptr;
  std::vector<float> whole(layout.flat_size()), part(layout.flat_size());
  layout.init(11, whole.data(), 0, layout.flat_size());
  const size_t cut = layout.flat_size() / 3;
  layout.init(11, part.data(), 0, cut);
  layout.init(11, part.data() + cut, cut, layout.flat_size());
  EXPECT_EQ(whole, part);
  const ParamInfo& ln = layout.find("transformer.h.1.ln_2.weight");
  for (size_t i = 0; i < ln.numel; ++i) EXPECT_EQ(whole[ln.offset + i], 1.0f);
  // Normal weights: mean ~0, std ~0.02 over the embedding.
  const ParamInfo& wte = layout.find("transformer.wte.weight");
  double s = 0, s2 = 0;
  for (size_t i = 0; i < wte.numel; ++i) {
    s += whole[wte.offset + i];
    s2 += double(whole[wte.offset + i]) * whole[wte.offset + i];
  }
  EXPECT_NEAR(std::sqrt(s2 / wte.numel), 0.02, 0.004);
}

}  // namespace
}  // namespace zt
