// zerotrain: trains GPT-2 with ZeRO from a DeepSpeed config and HF Trainer-style flags.
// Launch with mpirun or srun; a plain ./zerotrain is one rank.
#include <exception>
#include <optional>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "config/train_args.h"
#include "core/log.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  zt::set_log_program("zerotrain");
  std::optional<zt::MpiRuntime> mpi;
  try {
    mpi.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    zt::log_line(zt::LogLevel::kError, e.what());
    return 1;
  }
  const bool first = mpi->place().rank == 0;
  std::optional<zt::TrainArgs> args;
  try {
    args = zt::parse_train_args(argc, argv);  // the same argv everywhere: every rank agrees
  } catch (const zt::UsageError& e) {
    if (first) zt::log_line(zt::LogLevel::kError, e.what());
    return 2;
  }
  if (!args) return 0;  // --help or --version
  int code = 0;
  {
    zt::MpiComm comm(MPI_COMM_WORLD);
    // Caught here, while `comm` is alive: its progress thread may sit in a collective that the
    // other ranks will never finish, so nothing may wait for it. abort_job does not return.
    try {
      code = zt::run_trainer(*args, mpi->place(), comm);
      zt::check_log_written();  // a log on a full disk ends the run non-zero, like any lost output
    } catch (const zt::UsageError& e) {
      zt::MpiRuntime::abort_job(2, e.what());
    } catch (const std::exception& e) {
      // One failing rank ends every rank: MPI_Abort, never a hang in the next collective.
      zt::MpiRuntime::abort_job(1, e.what());
    }
  }
  return code;
}
