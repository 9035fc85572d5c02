#include "zero/engine_model.h"

namespace zt {

std::unique_ptr<BoundModel> make_engine_model(ZeroEngine& engine, const ModelLayout& layout, Backend& backend,
                                              KernelOps<float>& fp32_ops, KernelOps<bf16>& bf16_ops, int max_batch,
                                              int max_seq_len, bool activation_checkpointing, int classifier_chunk) {
  if (engine.activation_dtype() == DType::kBF16) {
    return bind_model(make_causal_lm<bf16>(layout, backend, bf16_ops, max_batch, max_seq_len, activation_checkpointing,
                                           classifier_chunk),
                      engine.params<bf16>());
  }
  return bind_model(make_causal_lm<float>(layout, backend, fp32_ops, max_batch, max_seq_len, activation_checkpointing,
                                          classifier_chunk),
                    engine.params<float>());
}

}  // namespace zt
