// The hooks between the model and whoever owns the parameters (the ZeRO engine, or a test).
// The model never touches parameter storage directly: before a unit runs it asks for its weights,
// and after a unit's backward it hands over the gradients. This is where stage 3 gathers and
// releases, where parameters become working copies in the model's dtype, and where stage 2 starts a
// reduce-scatter while the rest of backward runs.
#pragma once

#include "backend/kernel_ops.h"

namespace zt {

/// T is the model's activation dtype (kernel_ops.h): weights come as T working copies, gradients
/// go to GradOf<T> (fp32 in a bf16 model).
template <typename T>
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  /// The unit's weights, laid out as in the flat buffer from unit_offset(unit); valid until
  /// release_weights(unit). Called before every use (forward, recompute, backward).
  virtual const T* acquire_weights(int unit) = 0;
  virtual void release_weights(int unit) = 0;
  /// Where the model adds (+=) this micro-step's gradients of the unit. Called before the unit's
  /// backward starts (the lm_head's may start in the forward: CausalLM runs the classifier's
  /// backward there in training); stays valid until grads_done(unit).
  virtual GradOf<T>* grad_accumulator(int unit) = 0;
  /// The unit's backward is complete for this micro-step.
  virtual void grads_done(int unit) = 0;
  /// The whole backward of this micro-step is complete (every grads_done has been called).
  virtual void backward_done() {}
};

}  // namespace zt
