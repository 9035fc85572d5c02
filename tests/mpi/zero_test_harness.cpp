#include "zero_test_harness.h"

#include <mpi.h>

#include <cstdlib>

#include "backend/accelerator.h"
#include "backend/backend.h"
#include "comm/data_comm.h"
#include "comm/mpi_runtime.h"
#include "zero/engine_model.h"
#include "zero/mics_groups.h"

namespace zt {

ModelConfig tiny_model() {
  ModelConfig c;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 4;
  c.n_positions = 16;
  c.vocab_size = 97;
  return c;
}

ModelConfig tiny_llama() {
  ModelConfig c = tiny_model();
  c.model_type = "qwen2";
  c.n_kv_head = 2;
  c.intermediate_size = 48;
  c.layer_norm_epsilon = 1e-6;
  c.qkv_bias = true;
  c.tie_word_embeddings = false;
  return c;
}

DsConfig make_config(int stage, DType dtype, int world, int64_t accumulation) {
  DsConfig c;
  c.gradient_accumulation_steps = accumulation;
  c.train_micro_batch_size_per_gpu = kGlobalBatch / world / accumulation;
  c.train_batch_size = kGlobalBatch;
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.01;
  c.gradient_clipping = 1.0;
  c.bf16 = dtype == DType::kBF16;
  c.zero.stage = stage;
  // Small buckets so that reductions and gathers run in several pieces.
  c.zero.reduce_bucket_size = 3000;
  c.zero.allgather_bucket_size = 5000;
  c.zero.overlap_comm = true;
  c.zero.stage3_prefetch_bucket_size = 10000;
  c.zero.stage3_param_persistence_threshold = 100;
  c.zero.stage3_max_reuse_distance = 5000;
  return c;
}

void use_optimizer(DsConfig& cfg, OptimizerConfig::Type type) {
  cfg.optimizer.type = type;
  if (type == OptimizerConfig::Type::kLion) cfg.optimizer.lr = 1e-3;
  if (type == OptimizerConfig::Type::kAdagrad) cfg.optimizer.eps = 1e-10;  // torch's default
  if (type == OptimizerConfig::Type::kLamb) cfg.optimizer.lr = 1e-2;
  if (type == OptimizerConfig::Type::kAdafactor) {
    // torch's rule (its step min(lr, 1/sqrt(t)) x RMS(w), RMS(w) ~ 0.02 here), with transformers'
    // first moment beside it. transformers' eps1 of 1e-30 would step the attention's key bias, whose
    // gradient is rounding noise, by whole steps of the noise's sign, so that two reduction orders'
    // weights part there (the integration test's noise band, optimizers.sh); torch's clamp at
    // float32's epsilon squared keeps such steps small.
    cfg.optimizer.adafactor_torch = cfg.optimizer.relative_step = cfg.optimizer.scale_parameter = true;
    cfg.optimizer.adafactor_eps1 = 1.1920928955078125e-07;
    cfg.optimizer.lr = 0.3;
    cfg.optimizer.adafactor_beta1 = 0.9;
  }
  if (type == OptimizerConfig::Type::kMuon) {  // the matrices at Muon's usual rate, the rest at AdamW's
    cfg.optimizer.lr = cfg.optimizer.muon_lr = 0.02;
    cfg.optimizer.adam_lr = 3e-3;
  }
}

std::unique_ptr<Backend> test_backend() {
  const char* name = std::getenv("ZT_TEST_ACCELERATOR");
  return make_backend(name ? name : "cpu", node_local_rank(), "ZT_TEST_ACCELERATOR");
}

int32_t token(int64_t step, int64_t g, int t) {
  uint64_t x = uint64_t(step * 1000003 + g * 7919 + t * 31 + 17);
  x ^= x >> 13;
  x *= 0x9e3779b97f4a7c15ull;
  return int32_t((x >> 33) % 97);
}

void fill_micro_batch(int64_t data_step, int rank, int micro, int64_t accumulation, int64_t m, int32_t* in,
                      int32_t* tg) {
  const int64_t first = rank * micro * accumulation + m * micro;
  for (int b = 0; b < micro; ++b) {
    for (int t = 0; t < kSeq; ++t) {
      // The next token is the current one + 1 most of the time.
      const int32_t x = token(data_step, first + b, t);
      in[size_t(b) * kSeq + t] = x;
      tg[size_t(b) * kSeq + t] = (x + 1 + (token(data_step, first + b, t + 100) % 5 == 0)) % 97;
    }
  }
}

std::vector<double> train(HostComm& comm, const DsConfig& cfg, size_t* peak_live, ModelStateBytes* states,
                          std::vector<float>* master, const ModelConfig& model, DType activations) {
  auto backend = test_backend();
  return train_on(*backend, comm, cfg, peak_live, states, master, model, nullptr, nullptr, activations);
}

std::vector<double> train_on(Backend& backend, HostComm& comm, const DsConfig& cfg, size_t* peak_live,
                             ModelStateBytes* states, std::vector<float>* master, const ModelConfig& config,
                             std::string* data_comm, CommStats* data_stats, DType activations) {
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(config);
  const ModelLayout& layout = *layout_ptr;
  auto engine_comm = make_data_comm(backend, comm);
  // MiCS (mics_shard_size): the engine over this rank's shard group, as the trainer builds it.
  MicsGroups mics = split_mics(cfg, *engine_comm, comm);
  ZeroEngine engine(layout, backend, mics.engine_data(*engine_comm), mics.engine_control(comm), cfg, activations,
                    mics.replicas.get());
  engine.init_params(5);
  const int micro = int(cfg.train_micro_batch_size_per_gpu);
  // The classifier in chunks of 7 tokens (micro-batches of 1 to 16 sequences of 16), so that every
  // stage, offload and rank count also runs the chunked lm_head with its backward in the forward.
  const std::unique_ptr<BoundModel> model_ptr = make_engine_model(engine, layout, backend, micro, kSeq, false, 7);
  BoundModel& model = *model_ptr;
  std::vector<int32_t> in(size_t(micro) * kSeq), tg(size_t(micro) * kSeq);
  std::vector<double> losses;
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t m = 0; m < cfg.gradient_accumulation_steps; ++m) {
      fill_micro_batch(step, comm.rank(), micro, cfg.gradient_accumulation_steps, m, in.data(), tg.data());
      // As the trainer: the lm_head's backward runs in the forward, its gradient slot opened there.
      model.forward(in.data(), tg.data(), micro, kSeq, 1.0, engine.backward_scale());
      model.backward(engine.backward_scale());
    }
    engine.step();
    const double loss = model.take_loss();
    losses.push_back(comm.all_reduce_sum(loss / double(cfg.gradient_accumulation_steps)) / comm.size());
  }
  if (peak_live) *peak_live = engine.peak_live_parameters();
  if (states) *states = engine.model_state_bytes();
  if (master) *master = engine.gather_master_weights();
  if (data_comm) *data_comm = engine_comm->name();
  if (data_stats) *data_stats = engine_comm->stats();
  return losses;
}

}  // namespace zt
