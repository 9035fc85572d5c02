// MPI bootstrap: MPI_Init_thread, the process's place in the job (rank, world size, node and rank
// on the node through MPI_Comm_split_type(SHARED)), and ending every rank when one fails.
#pragma once

#include <mpi.h>

#include <functional>
#include <optional>
#include <string>

#include "core/error.h"

/// Checks an MPI call; the message carries MPI's own text (MPI_Error_string), as llm.c does.
#define ZT_MPI_CHECK(call)                                                                 \
  do {                                                                                     \
    int zt_mpi_rc_ = (call);                                                               \
    if (zt_mpi_rc_ != MPI_SUCCESS) ::zt::throw_mpi_error(__FILE__, __LINE__, #call, zt_mpi_rc_); \
  } while (0)

namespace zt {

[[noreturn]] void throw_mpi_error(const char* file, int line, const char* call, int code);

/// Where this process sits in the job.
struct ProcessPlace {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;  ///< within the node (shared-memory group)
  int node = 0, num_nodes = 1;         ///< node index, ordered by the lowest world rank on it
  std::string host;
};

/// A process that another launcher started as one of several ranks: torchrun and the deepspeed
/// launcher give each child WORLD_SIZE, RANK and LOCAL_WORLD_SIZE (deepspeed: LOCAL_SIZE), which
/// zerotrain never reads (its ranks come from MPI), so each child would be a world of one: N
/// independent runs writing the same output directory.
struct ForeignLaunch {
  std::string message;  ///< one line: what was seen, and the equivalent mpirun and srun commands
  bool quiet = false;   ///< RANK is above 0: exit without a word, so the job prints one line
};

/// The refusal for a process whose environment says WORLD_SIZE > 1 (an integer) while MPI sees
/// `mpi_world_size` == 1, or nothing. Under mpirun or srun, MPI sees the whole world and nothing
/// is refused, whatever WORLD_SIZE says. The commands it suggests are argv (without the deepspeed
/// launcher's --local_rank), shell-quoted; ranks per node from LOCAL_WORLD_SIZE or LOCAL_SIZE
/// when it divides WORLD_SIZE. `env` is getenv (a parameter for the tests).
std::optional<ForeignLaunch> check_foreign_launch(int mpi_world_size, int argc, const char* const* argv,
                                                  const std::function<const char*(const char*)>& env);

/// This process's rank among the ranks on its node (MPI_Comm_split_type, shared memory, over
/// MPI_COMM_WORLD): which GPU it takes. For programs that initialise MPI themselves (the tests and
/// benchmarks); MpiRuntime::place() has it otherwise. Collective.
int node_local_rank();

/// Owns MPI for the life of the process: MPI_Init_thread at MPI_THREAD_MULTIPLE (the MPI
/// communicator's progress thread runs collectives while the main thread computes, and the
/// main thread may call MPI_Abort at any time), MPI_Finalize at destruction.
class MpiRuntime {
 public:
  /// A process started by torchrun or the deepspeed launcher (check_foreign_launch) is refused
  /// here, where the world size is first known, so that every program that trains refuses it:
  /// the one line on stderr (from RANK 0 only), MPI_Finalize, exit 2 (bad usage).
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  const ProcessPlace& place() const { return place_; }

  /// Prints `message` once with this rank's number and ends every rank of the job with
  /// `exit_code`. A failure on one rank never leaves the others waiting in a collective.
  [[noreturn]] static void abort_job(int exit_code, const std::string& message);
  static bool initialized();

 private:
  ProcessPlace place_;
};

}  // namespace zt
