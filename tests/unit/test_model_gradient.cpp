// Each architecture's whole-model gradient against central finite differences in double
// precision, activation checkpointing against the plain backward, fp32 against fp64, and bf16
// activations against fp32: GPT-2, and the Llama family with grouped-query attention, every bias
// switch, tied and untied heads.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>

#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/memory_pool.h"
#include "grad_check.h"
#include "model/causal_lm.h"
#include "model/llama_layout.h"
#include "model/model_memory.h"

namespace zt {
namespace {

// Parameters and gradients in plain flat arrays, as a ZeRO engine would hold them: weights in the
// model's activation dtype, gradients in GradOf<T> (fp32 for a bf16 model).
template <typename T>
class FlatParams : public ParamSource<T> {
 public:
  explicit FlatParams(const ModelLayout& layout) : layout_(layout), weights(layout.flat_size()), grads(layout.flat_size(), 0) {}
  const T* acquire_weights(int unit) override { return weights.data() + layout_.unit_offset(unit); }
  void release_weights(int) override {}
  GradOf<T>* grad_accumulator(int unit) override { return grads.data() + layout_.unit_offset(unit); }
  void grads_done(int unit) override { ++done_count; }
  const ModelLayout& layout_;
  std::vector<T> weights;
  std::vector<GradOf<T>> grads;
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

// A tiny Llama-family model: 4 query heads sharing 2 kv heads of size 4.
ModelConfig tiny_llama(const std::string& type, bool tied) {
  ModelConfig c = tiny_config();
  c.model_type = type;
  c.n_embd = 16;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.intermediate_size = 24;
  c.layer_norm_epsilon = 1e-6;
  c.rope_theta = 100.0;  // angles that turn visibly over 6 positions
  c.tie_word_embeddings = tied;
  c.qkv_bias = type == "qwen2";
  c.attention_bias = c.mlp_bias = type == "llama";
  return c;
}

class ArchGradient : public ::testing::TestWithParam<ModelConfig> {};

INSTANTIATE_TEST_SUITE_P(Architectures, ArchGradient,
                         ::testing::Values(tiny_config(), tiny_llama("llama", false), tiny_llama("qwen2", true),
                                           tiny_llama("mistral", false)),
                         [](const auto& info) {
                           return info.param.model_type + (info.param.tie_word_embeddings ? "_tied" : "_untied");
                         });

TEST_P(ArchGradient, MatchesFiniteDifferences) {
  auto backend = make_cpu_backend();
  const ModelConfig cfg = GetParam();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(cfg);
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
  ASSERT_EQ(cfg.vocab_size, 11);
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

TEST_P(ArchGradient, CheckpointingGivesTheSameGradients) {
  auto backend = make_cpu_backend();
  ModelConfig cfg = GetParam();
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

TEST_P(ArchGradient, FloatModelAgreesWithDouble) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(GetParam());
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

// A bf16 model (bf16 activations and GEMM inputs, fp32 statistics and gradients) against the fp32
// model on the same weights (rounded to bf16 for both): the loss and the gradients within bf16's
// precision, yet not equal (the activations are rounded); with checkpointing, bit for bit the same.
TEST_P(ArchGradient, Bf16ModelTracksFloat) {
  auto backend = make_cpu_backend();
  ModelConfig cfg = GetParam();
  cfg.n_layer = 3;
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(cfg);
  const ModelLayout& layout = *layout_ptr;
  FlatParams<float> pf(layout);
  FlatParams<bf16> pb(layout), pc(layout);
  layout.init(7, pf.weights.data(), 0, layout.flat_size());
  for (size_t i = 0; i < pf.weights.size(); ++i) {
    pb.weights[i] = to_bf16(pf.weights[i]);
    pf.weights[i] = to_float(pb.weights[i]);
  }
  pc.weights = pb.weights;
  const int B = 2, T = 6;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (i * 5 + 1) % cfg.vocab_size;
    targets[i] = i == 3 ? -1 : (i * 3 + 2) % cfg.vocab_size;  // one ignored position
  }
  inputs[1] = cfg.vocab_size - 1;  // the embedding's last row
  const auto mf = make_causal_lm<float>(layout, *backend, backend->ops(), B, T, false);
  const auto mb = make_causal_lm<bf16>(layout, *backend, backend->ops_bf16(), B, T, false);
  const auto mc = make_causal_lm<bf16>(layout, *backend, backend->ops_bf16(), B, T, true);
  // bf16 activations take half the bytes, statistics aside.
  EXPECT_LT(mb->activation_bytes(), mf->activation_bytes() * 3 / 4);
  EXPECT_EQ(mb->activation_bytes(), activation_bytes(cfg, B, T, false, DType::kBF16, true));  // logsumexp saved
  EXPECT_EQ(mc->activation_bytes(), activation_bytes(cfg, B, T, true, DType::kBF16, true));
  mf->forward(pf, inputs.data(), targets.data(), B, T);
  // The CPU's bf16 kernels widen into one fp32 arena, in the device pool, as large as
  // zero_estimate says: their largest op's operands (all of them, at this size).
  const size_t before = pool_counter(Pool::kDevice).in_use();
  mb->forward(pb, inputs.data(), targets.data(), B, T);
  mb->backward(pb, 1.0);
  EXPECT_EQ(pool_counter(Pool::kDevice).in_use() - before, cpu_bf16_scratch_bytes(cfg, B, T));
  mb->take_loss();  // starts the sum again
  std::fill(pb.grads.begin(), pb.grads.end(), 0.0f);
  mb->forward(pb, inputs.data(), targets.data(), B, T);
  mc->forward(pc, inputs.data(), targets.data(), B, T);
  const double lf = mf->take_loss(), lb = mb->take_loss(), lc = mc->take_loss();
  EXPECT_NEAR(lb, lf, 1e-2 * lf);
  EXPECT_NE(lb, lf) << "the bf16 model computed in fp32";
  EXPECT_EQ(lc, lb);
  mf->backward(pf, 1.0);
  mb->backward(pb, 1.0);
  mc->backward(pc, 1.0);
  double err = 0, ref = 0;
  for (size_t i = 0; i < pf.grads.size(); ++i) {
    err += double(pb.grads[i] - pf.grads[i]) * double(pb.grads[i] - pf.grads[i]);
    ref += double(pf.grads[i]) * pf.grads[i];
  }
  ASSERT_GT(ref, 0);
  EXPECT_LT(std::sqrt(err / ref), 3e-2);
  EXPECT_GT(err, 0) << "the bf16 model's gradients equal the fp32 model's";
  EXPECT_EQ(0, std::memcmp(pb.grads.data(), pc.grads.data(), pb.grads.size() * sizeof(float)));
}

// A bf16 model of `cfg` at B x T, from fixed bf16 weights and tokens (one position's target
// ignored): one forward and backward through a kernel table, its loss, gradients and the
// device-pool bytes the table took meanwhile (the bf16 kernels' scratch).
class Bf16Case {
 public:
  struct Run {
    double loss;
    std::vector<float> grads;
    size_t scratch;
  };
  Bf16Case(const ModelConfig& cfg, int B, int T)
      : layout_(make_model_layout(cfg)), init_(layout_->flat_size()), B_(B), T_(T), inputs_(B * T), targets_(B * T) {
    layout_->init(5, init_.data(), 0, layout_->flat_size());
    for (int i = 0; i < B * T; ++i) {
      inputs_[i] = (i * 7 + 1) % cfg.vocab_size;
      targets_[i] = i == 4 ? -1 : (i * 3 + 2) % cfg.vocab_size;
    }
  }
  Run run(KernelOps<bf16>& ops, bool checkpointing) const {
    FlatParams<bf16> p(*layout_);
    for (size_t i = 0; i < init_.size(); ++i) p.weights[i] = to_bf16(init_[i]);
    const auto m = make_causal_lm<bf16>(*layout_, *backend_, ops, B_, T_, checkpointing);
    const size_t before = pool_counter(Pool::kDevice).in_use();
    m->forward(p, inputs_.data(), targets_.data(), B_, T_);
    m->backward(p, 1.0);
    return Run{m->take_loss(), p.grads, pool_counter(Pool::kDevice).in_use() - before};
  }

 private:
  std::unique_ptr<Backend> backend_ = make_cpu_backend();
  std::unique_ptr<ModelLayout> layout_;
  std::vector<float> init_;
  int B_, T_;
  std::vector<int32_t> inputs_, targets_;
};

// The CPU's bf16 kernels widen their operands a tile at a time within a scratch budget
// (backend/cpu/bf16_tiles.h): at budgets that cut every op into tiles of one row, one sequence or
// one GEMM output row (the lm_head's dx summed over the vocabulary one product at a time), and
// into tiles of several, a forward and backward give what the
// whole-operand run gives (the same arithmetic: the loss and every gradient within what
// OpenBLAS's GEMMs round differently on a tile than on the whole), and the scratch they take is
// the estimate's.
TEST_P(ArchGradient, Bf16TilesMatchWholeOperands) {
  const ModelConfig cfg = GetParam();
  const int B = 3, T = 6;
  const Bf16Case c(cfg, B, T);
  auto run = [&](size_t budget, bool checkpointing) {
    // OpenBLAS's GEMMs (not bf16 matmul mode: oneDNN may pick another kernel for another tile).
    const std::unique_ptr<KernelOps<bf16>> ops = cpu::make_bf16_kernels(cpu::make_kernels_f32_avx2(), budget);
    Bf16Case::Run r = c.run(*ops, checkpointing);
    EXPECT_EQ(r.scratch, cpu_bf16_scratch_bytes(cfg, B, T, 0, budget)) << "budget " << budget;
    return r;
  };
  const Bf16Case::Run whole = run(size_t(1) << 40, false);
  const size_t one_unit = cpu_bf16_scratch_bytes(cfg, B, T, 0, 1) / sizeof(float);
  const size_t all = cpu_bf16_scratch_bytes(cfg, B, T, 0, size_t(1) << 40) / sizeof(float);
  ASSERT_LT(one_unit, all) << "the smallest budget did not cut the largest op";
  for (size_t budget : {size_t(1), size_t(100), size_t(200), all / 3}) {
    for (bool checkpointing : {false, true}) {
      const Bf16Case::Run tiled = run(budget, checkpointing);
      const std::string what = "budget " + std::to_string(budget) + (checkpointing ? ", checkpointing" : "");
      EXPECT_NEAR(tiled.loss, whole.loss, 1e-6 * whole.loss) << what;
      double err = 0, ref = 0;
      for (size_t i = 0; i < whole.grads.size(); ++i) {
        err = std::max(err, double(std::abs(tiled.grads[i] - whole.grads[i])));
        ref = std::max(ref, double(std::abs(whole.grads[i])));
      }
      ASSERT_GT(ref, 0);
      EXPECT_LE(err, 1e-5 * ref) << what;
    }
  }
}

// Asked for bf16 GEMMs on a CPU with bf16 instructions, the bf16 kernels multiply the operands
// as they lie (oneDNN) and run attention on them (bf16_attention.h): a forward and backward within
// bf16's precision of the widened fp32 GEMMs' (the same products, summed in another order; the
// attention's probabilities rounded to bf16), with and without checkpointing (bit for bit then),
// and no widening scratch for GEMMs or attention: the arena is the estimate's with native_gemm
// (at this size the largest op is an elementwise one either way).
TEST_P(ArchGradient, Bf16GemmInPlaceTracksWidened) {
  const std::unique_ptr<cpu::Bf16Gemm> gemm = cpu::Bf16Gemm::make_if_supported();
  if (!gemm) GTEST_SKIP() << "this CPU has no bf16 GEMM instructions (AVX512-BF16 or AMX; or ZT_CPU_ISA=avx2)";
  const int B = 3, T = 70;  // the attention's query blocks of 64 and a part
  ModelConfig cfg = GetParam();
  cfg.n_positions = T;
  const Bf16Case c(cfg, B, T);
  auto run = [&](cpu::Bf16Gemm* in_place, bool checkpointing) {
    const auto ops = cpu::make_bf16_kernels(cpu::make_kernels_f32_avx512(), cpu::kBf16ScratchFloats, in_place);
    EXPECT_EQ(ops->set_matmul_dtype(DType::kBF16), DType::kBF16);
    return c.run(*ops, checkpointing);
  };
  const Bf16Case::Run widened = run(nullptr, false), in_place = run(gemm.get(), false),
                      again = run(gemm.get(), true);
  EXPECT_NEAR(in_place.loss, widened.loss, 2e-3 * widened.loss);
  EXPECT_NE(in_place.loss, widened.loss) << "the in-place GEMMs were not used";
  double err = 0, ref = 0;
  for (size_t i = 0; i < widened.grads.size(); ++i) {
    err += double(in_place.grads[i] - widened.grads[i]) * double(in_place.grads[i] - widened.grads[i]);
    ref += double(widened.grads[i]) * widened.grads[i];
  }
  ASSERT_GT(ref, 0);
  EXPECT_LT(std::sqrt(err / ref), 3e-2);
  EXPECT_EQ(again.loss, in_place.loss);
  EXPECT_EQ(0, std::memcmp(again.grads.data(), in_place.grads.data(), again.grads.size() * sizeof(float)));
  EXPECT_EQ(widened.scratch, cpu_bf16_scratch_bytes(cfg, B, T));
  EXPECT_EQ(in_place.scratch, cpu_bf16_scratch_bytes(cfg, B, T, 0, cpu::kBf16ScratchFloats, true));
}

// --classifier_chunk_tokens: the lm_head and the loss over chunks of 5 of the batch's 12 tokens
// (5, 5, 2), each chunk's backward run in the forward, against the whole batch at once, for fp32
// and bf16 models: the same loss and gradients within rounding (each row's work is the same; the
// head's gradient sums its rows in three GEMMs instead of one), the logits of one chunk held, as
// the memory estimate counts them; unchunked, the head's backward in the forward gives the
// backward's own bits. An evaluation forward (no backward scale) gives the same loss and leaves
// nothing for a backward: one is an error, as is a backward with another scale.
template <typename T>
void check_chunked_classifier(const ModelConfig& cfg) {
  auto backend = make_cpu_backend();
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(cfg);
  const ModelLayout& layout = *layout_ptr;
  FlatParams<T> whole(layout), chunked(layout);
  std::vector<float> init(layout.flat_size());
  layout.init(11, init.data(), 0, layout.flat_size());
  for (size_t i = 0; i < init.size(); ++i) {
    if constexpr (std::is_same_v<T, bf16>) whole.weights[i] = to_bf16(init[i]);
    else whole.weights[i] = init[i];
  }
  chunked.weights = whole.weights;
  const int B = 2, T_ = 6, BT = B * T_, V = cfg.vocab_size;
  std::vector<int32_t> inputs(BT), targets(BT);
  for (int i = 0; i < BT; ++i) {
    inputs[i] = (i * 7 + 2) % V;
    targets[i] = i == 4 ? -1 : (i * 5 + 3) % V;
  }
  KernelOps<T>& ops = backend->template kernels<T>();
  const auto mw = make_causal_lm<T>(layout, *backend, ops, B, T_, false, 0);
  const auto mc = make_causal_lm<T>(layout, *backend, ops, B, T_, false, 5);
  const std::string what = cfg.model_type + (std::is_same_v<T, bf16> ? " bf16" : " fp32");
  ASSERT_EQ(mw->logits_rows(), BT) << what;
  ASSERT_EQ(mc->logits_rows(), 5) << what;
  const DType dt = std::is_same_v<T, bf16> ? DType::kBF16 : DType::kF32;
  EXPECT_EQ(mc->activation_bytes(), activation_bytes(cfg, B, T_, false, dt, ops.attention_saves_lse(), 0, 5)) << what;
  EXPECT_EQ(mw->activation_bytes() - mc->activation_bytes(), size_t(BT - 5) * V * sizeof(T)) << what;

  const double scale = 0.5;
  mw->forward(whole, inputs.data(), targets.data(), B, T_);
  mc->forward(chunked, inputs.data(), targets.data(), B, T_, 1.0, scale);
  const double lw = mw->take_loss(), lc = mc->take_loss();
  EXPECT_NEAR(lc, lw, 1e-6 * lw) << what;
  mw->backward(whole, scale);
  mc->backward(chunked, scale);
  EXPECT_EQ(chunked.done_count, whole.done_count) << what;
  double err = 0, ref = 0;
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    err += double(chunked.grads[i] - whole.grads[i]) * double(chunked.grads[i] - whole.grads[i]);
    ref += double(whole.grads[i]) * double(whole.grads[i]);
  }
  ASSERT_GT(ref, 0) << what;
  EXPECT_LT(std::sqrt(err / ref), 1e-5) << what;

  // Unchunked and given the scale (the trainer's path where the logits fit): the head's backward
  // in the forward, bit for bit the backward's own on the CPU (the same ops in the same order).
  FlatParams<T> fused(layout);
  fused.weights = whole.weights;
  mw->forward(fused, inputs.data(), targets.data(), B, T_, 1.0, scale);
  EXPECT_EQ(mw->take_loss(), lw) << what;
  mw->backward(fused, scale);
  EXPECT_EQ(0, std::memcmp(fused.grads.data(), whole.grads.data(), whole.grads.size() * sizeof(whole.grads[0])))
      << what << ": the unchunked head's backward in the forward";

  mc->forward(chunked, inputs.data(), targets.data(), B, T_);  // an evaluation
  EXPECT_NEAR(mc->take_loss(), lw, 1e-6 * lw) << what;
  EXPECT_THROW(mc->backward(chunked, scale), std::exception) << what << ": a backward with no logits kept";
  mc->forward(chunked, inputs.data(), targets.data(), B, T_, 1.0, scale);
  EXPECT_THROW(mc->backward(chunked, 2 * scale), std::exception) << what << ": another scale";
}

TEST_P(ArchGradient, ChunkedClassifierMatchesWhole) {
  check_chunked_classifier<float>(GetParam());
  check_chunked_classifier<bf16>(GetParam());
}

// The bf16 table's classifier_forward_backward (the softmax's forward and backward on each tile
// while it is in cache) against classifier_forward then classifier_backward: bit for bit in the
// losses, their sum, dlogits, dx and dhead, with OpenBLAS's GEMMs on widened tiles and, where the
// CPU has them, oneDNN's on the operands as they lie. The rows make three cache tiles and a part
// at any thread count; every fifth row's target wins by a wide margin (losses of 1e-7 to 1e-3
// beside others near 11: the loss sum adds the rows in row order on both paths); some targets
// are ignored (-1).
TEST(Bf16Classifier, ForwardBackwardInOneIsTheTwoOpsBitForBit) {
  const int C = 24, V = 50000;
  const int tile_rows = int(cpu::kCacheTileFloats * size_t(omp_get_max_threads()) / size_t(V));
  const int rows = 3 * tile_rows + 5;
  std::vector<bf16> x(size_t(rows) * C), head(size_t(V) * C);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bf16& v : x) v = to_bf16(normal(rng));
  for (bf16& v : head) v = to_bf16(0.3f * normal(rng));
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    targets[size_t(r)] = r % 11 == 3 ? -1 : int32_t((size_t(r) * 7919) % size_t(V));
    if (r % 5 != 0 || targets[size_t(r)] < 0) continue;
    for (int c = 0; c < C; ++c) {  // head[target] = 1.1 x[r]: a logit near 1.1 |x|^2, about 26
      head[size_t(targets[size_t(r)]) * C + c] = to_bf16(1.1f * to_float(x[size_t(r) * C + c]));
    }
  }
  struct Out {
    std::vector<bf16> logits, dx;
    std::vector<float> losses, dhead;
    double loss_sum = 0.25;
  };
  const std::unique_ptr<cpu::Bf16Gemm> gemm = cpu::Bf16Gemm::make_if_supported();
  std::vector<cpu::Bf16Gemm*> gemms{nullptr};  // widened tiles, and oneDNN where the CPU has bf16 GEMMs
  if (gemm) gemms.push_back(gemm.get());
  for (cpu::Bf16Gemm* in_place : gemms) {
    const std::unique_ptr<KernelOps<bf16>> ops =
        cpu::make_bf16_kernels(cpu::make_kernels_f32_avx2(), cpu::kBf16ScratchFloats, in_place);
    ops->set_matmul_dtype(DType::kBF16);
    auto run = [&](bool fused) {
      Out o;
      o.logits.resize(size_t(rows) * V);
      o.dx.resize(size_t(rows) * C);
      o.losses.resize(size_t(rows));
      o.dhead.assign(head.size(), 0.125f);  // accumulated into
      const double weight = 0.5, dloss = 1.0 / 35;
      if (fused) {
        ops->classifier_forward_backward(o.dx.data(), o.dhead.data(), o.logits.data(), o.losses.data(), x.data(),
                                         head.data(), targets.data(), rows, C, V, &o.loss_sum, weight, dloss);
      } else {
        ops->classifier_forward(o.logits.data(), o.losses.data(), x.data(), head.data(), targets.data(), rows, C, V,
                                &o.loss_sum, weight);
        ops->classifier_backward(o.dx.data(), o.dhead.data(), o.logits.data(), x.data(), head.data(),
                                 targets.data(), rows, C, V, dloss);
      }
      return o;
    };
    const Out two = run(false), one = run(true);
    const std::string what = in_place ? "oneDNN's GEMMs" : "widened GEMMs";
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    EXPECT_TRUE(same(one.logits, two.logits)) << what << ": dlogits";
    EXPECT_TRUE(same(one.dx, two.dx)) << what << ": dx";
    EXPECT_TRUE(same(one.losses, two.losses)) << what << ": losses";
    EXPECT_TRUE(same(one.dhead, two.dhead)) << what << ": dhead";
    EXPECT_EQ(one.loss_sum, two.loss_sum) << what;
    EXPECT_GT(two.loss_sum, 1.0) << what << ": no loss was added";
    EXPECT_EQ(two.losses[3], 0.0f) << what << ": an ignored target has a loss";
    EXPECT_LT(two.losses[0], 1e-2f) << what << ": the wide margin's loss is not small";
  }
}

// auto chunks only where the whole batch's logits pass 1 GiB, by multiples of 64 rows.
TEST(ClassifierChunk, AutoKeepsTheLogitsUnderOneGiB) {
  const size_t gib = size_t(1) << 30;
  EXPECT_EQ(classifier_logits_rows(16384, 50304 * 2, kClassifierChunkAuto), 10624u);  // GPT-2, bf16, padded
  EXPECT_EQ(classifier_logits_rows(8192, 128256 * 2, kClassifierChunkAuto), 4160u);   // Llama 3, bf16
  EXPECT_EQ(classifier_logits_rows(4096, 50257 * 4, kClassifierChunkAuto), 4096u);    // 823 MB: whole
  EXPECT_EQ(classifier_logits_rows(100, gib, kClassifierChunkAuto), 64u);             // at least 64 rows
  EXPECT_EQ(classifier_logits_rows(8192, 128256 * 2, 0), 8192u);
  EXPECT_EQ(classifier_logits_rows(8192, 128256 * 2, 1000), 1000u);
  EXPECT_EQ(classifier_logits_rows(10, 128256 * 2, 1000), 10u);
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

TEST(LlamaLayout, HfNamesShapesUnitsAndBiases) {
  const ModelConfig untied = tiny_llama("llama", false);
  const LlamaLayout llama(untied);
  EXPECT_EQ(llama.find("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 16}));  // [NKV hs, C]
  EXPECT_EQ(llama.find("model.layers.1.self_attn.o_proj.bias").shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(llama.find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(llama.find("model.layers.0.mlp.up_proj.bias").shape, (std::vector<int64_t>{24}));
  const ParamInfo& head = llama.find("lm_head.weight");
  EXPECT_EQ(head.unit, llama.num_units() - 1);  // its own unit, the last: its gradients finish first
  EXPECT_EQ(llama.lm_head_unit(), head.unit);
  EXPECT_EQ(llama.tied_unit(), -1);
  EXPECT_EQ(int64_t(llama.num_params()), untied.num_params());
  // Qwen2: biases on q, k and v only; tied: no lm_head tensor, the embedding is the tied unit.
  const LlamaLayout qwen(tiny_llama("qwen2", true));
  EXPECT_EQ(qwen.find("model.layers.0.self_attn.v_proj.bias").shape, (std::vector<int64_t>{8}));
  EXPECT_THROW(qwen.find("model.layers.0.self_attn.o_proj.bias"), UsageError);
  EXPECT_THROW(qwen.find("model.layers.0.mlp.gate_proj.bias"), UsageError);
  EXPECT_THROW(qwen.find("lm_head.weight"), UsageError);
  EXPECT_EQ(qwen.tied_unit(), 0);
  EXPECT_EQ(qwen.lm_head_unit(), 0);
  EXPECT_EQ(qwen.block().o_bias, LlamaBlockOffsets::kNone);
  for (const auto& p : qwen.params()) EXPECT_EQ(p.offset % kParamAlignment, 0u) << p.name;
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
