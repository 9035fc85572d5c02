// main() for multi-rank GoogleTest binaries (HDF5 testpar / ADIOS2 style): MPI_Init_thread,
// RUN_ALL_TESTS, then every rank agrees on the verdict before anyone reports it.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {  // print once: rank 0 reports, the others only fail the verdict
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::printf("[  FAILED  ] on another rank (see its output)\n");
  MPI_Finalize();
  return any_failed;
}
