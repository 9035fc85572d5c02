// The model that computes with a ZeroEngine: the CausalLM of the engine's activation dtype (fp32
// or bf16) over the kernel table of that dtype, bound to the engine's parameters. What the
// trainer, the engine tests and the GPU benchmark each build the same way.
#pragma once

#include <memory>

#include "model/bound_model.h"
#include "model/model_layout.h"
#include "zero/engine.h"

namespace zt {

/// make_causal_lm over `fp32_ops` or `bf16_ops` (the backend's own tables, or decorated ones such as the
/// self-profile's), whichever is engine.activation_dtype()'s, bound to engine.params<T>().
std::unique_ptr<BoundModel> make_engine_model(ZeroEngine& engine, const ModelLayout& layout, Backend& backend,
                                              KernelOps<float>& fp32_ops, KernelOps<bf16>& bf16_ops, int max_batch,
                                              int max_seq_len, bool activation_checkpointing,
                                              int classifier_chunk = 0);
/// The same over the backend's own tables.
inline std::unique_ptr<BoundModel> make_engine_model(ZeroEngine& engine, const ModelLayout& layout, Backend& backend,
                                                     int max_batch, int max_seq_len, bool activation_checkpointing,
                                                     int classifier_chunk = 0) {
  return make_engine_model(engine, layout, backend, backend.ops(), backend.ops_bf16(), max_batch, max_seq_len,
                           activation_checkpointing, classifier_chunk);
}

}  // namespace zt
