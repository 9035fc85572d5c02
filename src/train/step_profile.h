// zerotrain --profile_steps N (issue 30): where a training step's time goes, per op class, timed
// with the backend's timing events (CUDA events on a GPU), so that a short run on a GPU knows
// where to look without an external profiler. The run is built over the profiler's kernel table
// (the backend's, each op bracketed: backend/profiled_kernels.h) and data communicator (the
// backend's, each wait on a collective bracketed). The run's first step warms up (allocations,
// cuBLASLt's algorithm choices, NCCL's set-up) and is not profiled; the next N are, or as many as
// the run has. Then rank 0 prints one table and metrics.jsonl gets a `profile` line.
//
// What each class measures, per step (all but host gaps on the compute stream's timeline):
//   gemm, attention, norm,  the op table's ops (OpClass lists which), each from when the compute
//   classifier,             stream reached the event before it to when it reached the one after
//   elementwise
//   optimizer               the engine's step (Adam, norms, clipping, casts, the parameters'
//                           gather) bracketed the same way, less the communication inside it
//   communication           the compute stream held up by collectives: from the event before a
//                           wait on one (a stream wait, or the host blocking) to the event after.
//                           A collective overlapped by compute costs nothing here
//   host gaps               the step's wall time (the host's clock) less all of the above: the
//                           host's own work (the batch, bookkeeping, launches the stream waited
//                           for) and the stream's work outside the op table and the engine's step
//                           (token uploads, gradient-bucket copies and casts, the loss read)
// A decorated op costs two event records (on a GPU a few microseconds of host time), and a
// profiled step one synchronize more; with N = 0 nothing is decorated.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "backend/backend.h"
#include "backend/profiled_kernels.h"

namespace zt {

class DataComm;
class HostComm;
class MetricsWriter;

class StepProfiler {
 public:
  /// Profiles `steps` steps after the run's first (0: off, and every call below is a branch).
  StepProfiler(Backend& backend, DataComm& data_comm, int64_t steps);
  ~StepProfiler();

  /// The kernel table to build the model over: the backend's own, decorated when profiling.
  template <typename T>
  KernelOps<T>& kernels();
  /// The data communicator to build the engine over: `data_comm`, decorated when profiling.
  DataComm& data_comm();

  /// Around each training step (`step`: its number).
  void begin_step(int64_t step);
  void end_step();
  /// Around the engine's step.
  void begin_optimizer();
  void end_optimizer();
  /// After each training step: once N steps are profiled, or at `last_step` with fewer, rank 0
  /// prints the table and writes the `profile` line. Collective: every rank calls it after every step.
  void report_if_done(int64_t step, int64_t last_step, HostComm& comm, MetricsWriter& metrics);

 private:
  Backend& backend_;
  DataComm& data_comm_;
  const int64_t steps_;
  std::unique_ptr<OpTimeline> timeline_;  // null when not profiling, as the decorations below
  std::unique_ptr<KernelOps<float>> kernels_f32_;
  std::unique_ptr<KernelOps<bf16>> kernels_bf16_;
  std::unique_ptr<DataComm> profiled_comm_;
  int64_t started_ = 0, profiled_ = 0, first_step_ = 0, last_step_ = 0;
  bool reported_ = false;
  StepTimes total_;               // summed over the profiled steps
  double engine_step_host_ms_ = 0;  // the engine's step on the host's clock, summed likewise
  std::chrono::steady_clock::time_point optimizer_start_;
};

template <typename T>
KernelOps<T>& StepProfiler::kernels() {
  if constexpr (std::is_same_v<T, float>) {
    return kernels_f32_ ? *kernels_f32_ : backend_.ops();
  } else {
    return kernels_bf16_ ? *kernels_bf16_ : backend_.ops_bf16();
  }
}

}  // namespace zt
