// main() for the gpu-labelled GoogleTest binaries: with no usable GPU every rank prints why and
// exits 77 (ctest's SKIP_RETURN_CODE), so ctest reports the test skipped, never passed. Otherwise
// as tests/mpi/mpi_test_main.cpp: MPI_Init_thread, RUN_ALL_TESTS, every rank agrees on the verdict.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (zt::cuda::device_count() == 0) {
    if (rank == 0) std::printf("skipped: no usable GPU (%s)\n", zt::cuda::unavailable_reason().c_str());
    MPI_Finalize();
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
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
