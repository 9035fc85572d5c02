// What the model itself says about its memory, for estimates before a run: its parameter layout,
// its activations for a batch, and DeepSpeed's "largest layer". The one place zero/'s estimator
// learns about an architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cpu/bf16_tiles.h"
#include "config/model_config.h"
#include "core/dtype.h"

namespace zt {

/// One device allocation of a model's activations: `elements` of the activation dtype, or of the
/// statistics type when `stat` (fp32 in a bf16 model: kernel_ops.h's KernelTypes).
struct ActivationArray {
  size_t elements = 0;
  bool stat = false;
};

/// The arrays of activations and backward scratch Gpt2Model allocates on the device, one field per
/// allocation: its constructor allocates exactly these, so the estimate and the model cannot
/// disagree. Fields are in activation elements except the statistics (act_stats, lnf_mean,
/// lnf_rstd, losses), which are in statistics elements.
struct Gpt2ActivationArrays {
  size_t per_block = 0, per_block_stats = 0;  ///< what one block keeps, of each type
  size_t block_inputs = 0, acts = 0, act_stats = 0, lnf = 0, lnf_mean = 0, lnf_rstd = 0, logits = 0, losses = 0;
  size_t dres = 0, dln = 0, dqkv = 0, datty = 0, dfch = 0;
  /// Every allocation, in the constructor's order.
  std::vector<ActivationArray> arrays() const;
};
/// `attention_lse`: the kernels save each attention row's logsumexp instead of its probabilities
/// (KernelOps::attention_saves_lse); `logits_stride`: the row stride of the logits
/// (KernelOps::logits_stride; 0: the vocabulary); `logits_rows`: the rows of logits held at once
/// (classifier_logits_rows; 0: every token of the batch).
Gpt2ActivationArrays gpt2_activation_arrays(const ModelConfig& config, size_t batch, size_t seq_len,
                                            bool gradient_checkpointing, bool attention_lse = false,
                                            size_t logits_stride = 0, size_t logits_rows = 0);

/// The same for LlamaModel (the Llama family); statistics: act_stats, lnf_rstd, losses and the
/// rotary tables.
struct LlamaActivationArrays {
  size_t per_block = 0, per_block_stats = 0;
  size_t block_inputs = 0, acts = 0, act_stats = 0, lnf = 0, lnf_rstd = 0, logits = 0, losses = 0, rope_cos = 0,
         rope_sin = 0;
  size_t dres = 0, dln = 0, datty = 0, dq = 0, dk = 0, dv = 0, dh = 0, dgate = 0, dup = 0;
  size_t xn = 0;  ///< the norm outputs, one block's at a time (recomputed in the backward)
  std::vector<ActivationArray> arrays() const;
};
LlamaActivationArrays llama_activation_arrays(const ModelConfig& config, size_t batch, size_t seq_len,
                                              bool gradient_checkpointing, bool attention_lse = false,
                                              size_t logits_stride = 0, size_t logits_rows = 0);

/// --classifier_chunk_tokens: the lm_head and the loss over at most this many tokens at a time,
/// each chunk's backward run in the forward (CausalLM::head_forward), so that the logits of only
/// one chunk are ever held: kClassifierChunkAuto, 0 (the whole batch at once) or a row count.
constexpr int kClassifierChunkAuto = -1;
/// Under auto, the logits held at once stay within this (when one chunk of 64 rows fits in it).
constexpr size_t kClassifierChunkAutoBytes = size_t(1) << 30;
/// The rows of logits a model holds for batches of up to `rows` tokens whose logits rows are
/// `row_bytes` each (the row stride times the activation size), given `classifier_chunk`: all of
/// them when 0 or at least `rows`; auto: all when they fit in kClassifierChunkAutoBytes, else the
/// largest multiple of 64 rows that does (at least 64).
size_t classifier_logits_rows(size_t rows, size_t row_bytes, int classifier_chunk);

/// Bytes of each activation array the model allocates for a forward and backward of `batch`
/// sequences of `seq_len` tokens with activations in `activation_dtype` (fp32 or bf16;
/// statistics fp32), with one block kept at a time under gradient checkpointing: one entry per
/// device allocation (the CUDA allocator rounds each).
std::vector<size_t> activation_allocations(const ModelConfig& config, size_t batch, size_t seq_len,
                                           bool gradient_checkpointing, DType activation_dtype = DType::kF32,
                                           bool attention_lse = false, size_t logits_stride = 0,
                                           size_t logits_rows = 0);
/// Their sum.
size_t activation_bytes(const ModelConfig& config, size_t batch, size_t seq_len, bool gradient_checkpointing,
                        DType activation_dtype = DType::kF32, bool attention_lse = false, size_t logits_stride = 0,
                        size_t logits_rows = 0);

/// The fp32 scratch the CPU's bf16 kernels hold (backend/cpu/bf16_kernels.cpp: each op widens
/// its bf16 operands a tile at a time into one arena, which grows to the largest op's tile): the
/// largest of a forward and backward of `batch` x `seq_len`, the classifier over `logits_rows`
/// rows a call (0: all), for a scratch budget of `budget` floats (bf16_tiles.h). With
/// `native_gemm` (a training run's bf16 GEMMs where they take the bf16 operands as they lie:
/// cpu_bf16_gemm_in_place) the GEMMs and attention widen nothing: only the other ops count (the
/// attention's per-thread blocks, bf16_attention.h, are not in the pools). The classifier's softmax
/// counts in the tiles an evaluation's forward takes; a training step's (classifier_forward_backward,
/// in cache-sized tiles) takes fewer, so where that op is the largest (GEMMs in place) a run that
/// never evaluates holds less than this.
size_t cpu_bf16_scratch_bytes(const ModelConfig& config, size_t batch, size_t seq_len, size_t logits_rows = 0,
                              size_t budget = cpu::kBf16ScratchFloats, bool native_gemm = false);

/// The weight packs the CPU's bf16 kernels keep where they may hold a bf16 model's weights in
/// their GEMMs' layout (KernelOps::weight_packs; the ZeRO engine at stages 0-2): each GEMM weight
/// in the layout of its forward and of its backward's dx, `pack(K, N)` bytes for a K x N operand
/// (cpu_bf16_weight_pack_bytes: 0 where none are kept). One allocation each, in bytes.
std::vector<size_t> bf16_weight_packs(const ModelConfig& config, const std::function<size_t(int, int)>& pack);

/// DeepSpeed's "largest layer": the most parameters held directly by one module of the HF model
/// (the token embedding or the lm_head, or an MLP projection when the model is wide).
int64_t largest_layer_params(const ModelConfig& config);

}  // namespace zt
