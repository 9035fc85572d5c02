// The self-profile's instruments (zerotrain --profile_steps, train/step_profile.h): brackets of
// backend timing events on the compute stream, each attributed to an op class, and a KernelOps
// decorator that brackets every op of the table it wraps. A bracket measures the compute stream's
// timeline, not the host's: from when the stream reached its start event to when it reached its
// end event (CUDA events on a GPU; on the CPU backend, whose operations run as they are called,
// the host's clock around the call). Nothing here exists in a run that does not profile.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_ops.h"

namespace zt {

/// Where a step's time goes. The first five are the op table's ops (ProfiledKernels); the trainer
/// brackets the engine's step (optimizer) and the collective waits (communication).
enum class OpClass : int {
  kGemm,           ///< matmul_*, linear_* (the lm_head's GEMM among them; a fused residual or GELU with its GEMM)
  kAttention,      ///< attention_*, gqa_attention_*
  kNorm,           ///< layernorm_*, rmsnorm_*
  kClassifier,     ///< softmax_xent_*: softmax, cross-entropy and its gradient
  kElementwise,    ///< gelu_*, swiglu_*, residual_forward, accumulate, rotary, embedding_*
  kOptimizer,      ///< the engine's step, less the collective waits inside it
  kCommunication,  ///< the compute stream held up by collectives (waits on them, stream or host)
};
inline constexpr int kNumOpClasses = 7;
/// "gemm", "attention", "norm", "classifier", "elementwise", "optimizer", "communication".
const char* op_class_name(OpClass c);

/// One profiled step: per class, the bracketed milliseconds and the number of brackets.
struct StepTimes {
  /// Exclusive: a bracket nested in another (a collective wait inside the engine's step) counts
  /// for its own class only.
  std::array<double, kNumOpClasses> ms{};
  std::array<int64_t, kNumOpClasses> calls{};
  double wall_ms = 0;  ///< the host's clock from begin_step to the end of end_step's synchronize
};

/// Brackets on the compute stream during a step, recorded with timing events from a pool that
/// every step reuses, and read once at the step's end: the one synchronize it adds per step.
class OpTimeline {
 public:
  explicit OpTimeline(Backend& backend) : backend_(backend) {}
  /// Starts a profiled step: brackets are recorded from now until end_step.
  void begin_step();
  /// Whether a step is being profiled; outside one, begin and end must not be called.
  bool active() const { return active_; }
  /// Opens a bracket of class `c` (nested in the one open, if any): its start event is recorded
  /// on the compute stream now.
  void begin(OpClass c);
  /// Closes the innermost open bracket: its end event is recorded on the compute stream now.
  void end();
  /// Ends the step: waits for the compute stream, then reads every bracket's time.
  StepTimes end_step();

 private:
  struct Bracket {
    OpClass cls;
    int parent;  // the bracket this one is nested in, or -1
    size_t start, end;  // in events_
  };
  size_t record_next();

  Backend& backend_;
  std::vector<std::unique_ptr<Event>> events_;  // the pool: grows to the busiest step's brackets
  size_t used_ = 0;                              // events recorded this step
  std::vector<Bracket> brackets_;
  std::vector<int> open_;                        // the open brackets, innermost last
  bool active_ = false;
  std::chrono::steady_clock::time_point step_start_;
};

/// `inner` with each op bracketed in `timeline` under its class while a step is profiled (a
/// branch otherwise). Results are `inner`'s, bit for bit: every op, setting and property forwards
/// to it unchanged. Implemented for float and bf16.
template <typename T>
std::unique_ptr<KernelOps<T>> make_profiled_kernels(KernelOps<T>& inner, OpTimeline& timeline);

}  // namespace zt
