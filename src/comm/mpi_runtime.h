// MPI bootstrap: MPI_Init_thread, the process's place in the job (rank, world size, node and rank
// on the node through MPI_Comm_split_type(SHARED)), and ending every rank when one fails.
#pragma once

#include <mpi.h>

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

/// Owns MPI for the life of the process: MPI_Init_thread at MPI_THREAD_MULTIPLE (the MPI
/// communicator's progress thread runs collectives while the main thread computes, and the
/// main thread may call MPI_Abort at any time), MPI_Finalize at destruction.
class MpiRuntime {
 public:
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
