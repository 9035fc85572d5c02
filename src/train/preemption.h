// Preemption: Slurm sends SIGTERM to every task of a job it preempts, requeues or cancels with
// `scancel --signal=TERM` (and `--signal=USR1@T` is the usual "time is nearly up" warning). The
// handler only records the signal; the training loop agrees across ranks at the end of each step
// that someone was signalled, saves a checkpoint and exits 0, so a requeued job with
// --resume_from_checkpoint auto continues exactly where this one stopped.
#pragma once

namespace zt {

class PreemptionWatch {
 public:
  /// Installs handlers for SIGTERM and SIGUSR1 (restored by the destructor).
  PreemptionWatch();
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  /// The signal received so far (0: none).
  int signal() const;
};

}  // namespace zt
