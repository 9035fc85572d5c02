// Signals that stop training at the end of a step, with a checkpoint.
//
// Preemption: Slurm sends SIGTERM to every task of a job it preempts, requeues or cancels with
// `scancel --signal=TERM` (and `--signal=USR1@T` is the usual "time is nearly up" warning);
// jobs/train_mpirun.sh turns a SIGTERM of its own into SIGUSR1, which mpirun forwards. The job
// saves and exits 0, so a requeued job with --resume_from_checkpoint auto continues exactly
// where this one stopped.
//
// Interrupt: the first SIGINT (Ctrl-C on a direct run, or srun forwarding it) finishes the step,
// saves, says where, and exits 130 as an interrupted program does; a second one exits at once
// without saving (an interrupted save never touches `latest`). SIGUSR2 counts as SIGINT: Open
// MPI's mpirun cannot forward SIGINT (it answers Ctrl-C with SIGCONT at once, then SIGTERM and
// SIGKILL odls_base_sigkill_timeout apart, 0 s by default), but forwards SIGUSR1 and SIGUSR2 at
// once, so jobs/train_mpirun.sh turns Ctrl-C into SIGUSR2 for mpirun.
//
// The handlers only record the signal; the training loop agrees across ranks at the end of each
// step whether anyone was signalled.
#pragma once

namespace zt {

class StopSignals {
 public:
  /// Installs handlers for SIGTERM, SIGUSR1, SIGINT and SIGUSR2 (restored by the destructor).
  /// `announce`: this process says on stderr, from the handler, what an interrupt will do.
  explicit StopSignals(bool announce);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// SIGTERM or SIGUSR1 received so far (0: none).
  int preemption() const;
  /// The interrupt received so far (SIGINT or SIGUSR2; 0: none).
  int interrupted() const;
};

}  // namespace zt
