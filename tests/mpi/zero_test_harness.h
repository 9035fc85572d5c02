// The small model, config and training loop that the multi-rank engine tests share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "config/ds_config.h"
#include "config/model_config.h"
#include "zero/engine.h"

namespace zt {

inline constexpr int kSeq = 16, kGlobalBatch = 16, kSteps = 30;

/// GPT-2: 3 layers, 32 wide, vocab 97.
ModelConfig tiny_model();
/// Llama: 3 layers, 32 wide, 4 heads on 2 kv heads, q/k/v biases (as Qwen2), an untied lm_head.
ModelConfig tiny_llama();
/// A config for `stage` whose buckets are small enough that reductions and gathers run in pieces.
DsConfig make_config(int stage, DType dtype, int world, int64_t accumulation);
/// Switches `cfg` to another optimizer, at a learning rate that suits it on the tiny model: Lion's
/// signed steps want a smaller one, Lamb's trust-ratio steps a larger one. (Adagrad keeps Adam's 3e-3: its first step is +-lr on every
/// weight whose gradient is not exactly 0, so at 3e-2 the rounding noise of near-zero gradients,
/// which differs between stages and dtypes, moves weights by whole steps.)
void use_optimizer(DsConfig& cfg, OptimizerConfig::Type type);
/// The backend the tests run on: ZT_TEST_ACCELERATOR (cpu, emulated, cuda), cpu when unset.
std::unique_ptr<Backend> test_backend();
/// Token t of global sample g at `step`: a fixed pseudo-random sequence, the same on every rank.
int32_t token(int64_t step, int64_t g, int t);
/// Micro-batch `m` of this rank's slice of data step `data_step` (micro sequences of kSeq tokens):
/// the inputs and the targets of a learnable rule with noise.
void fill_micro_batch(int64_t data_step, int rank, int micro, int64_t accumulation, int64_t m, int32_t* in,
                      int32_t* tg);
/// Trains kSteps on `comm` (each rank takes its contiguous slice of the global batch) and returns
/// the mean loss of every step. Optionally reports stage 3's peak live parameters, the model-state
/// bytes, and the final fp32 master weights.
/// `activations`: the model's activation dtype (fp32 or bf16, kernel_ops.h).
std::vector<double> train(HostComm& comm, const DsConfig& cfg, size_t* peak_live = nullptr,
                          ModelStateBytes* states = nullptr, std::vector<float>* master = nullptr,
                          const ModelConfig& model = tiny_model(), DType activations = DType::kF32);
/// The same on a given backend (the GPU tests train on the CUDA and the CPU backend in one process),
/// optionally reporting the engine's data communicator's name and counts.
std::vector<double> train_on(Backend& backend, HostComm& comm, const DsConfig& cfg, size_t* peak_live = nullptr,
                             ModelStateBytes* states = nullptr, std::vector<float>* master = nullptr,
                             const ModelConfig& model = tiny_model(), std::string* data_comm = nullptr,
                             CommStats* data_stats = nullptr, DType activations = DType::kF32);

}  // namespace zt
