// main() for multi-rank GoogleTest binaries (HDF5 testpar / ADIOS2 style): MPI_Init_thread,
// RUN_ALL_TESTS, then every rank agrees on the verdict before anyone reports it. A run that needs
// a GPU (the gpu-labelled binaries, built with ZT_TEST_NEEDS_GPU, or ZT_TEST_ACCELERATOR=cuda)
// where none can be used exits 77, ctest's skip, with the reason: skipped, never passed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#if ZT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#ifndef ZT_TEST_NEEDS_GPU
#define ZT_TEST_NEEDS_GPU 0
#endif

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* accelerator = std::getenv("ZT_TEST_ACCELERATOR");
  if (ZT_TEST_NEEDS_GPU || (accelerator && std::string(accelerator) == "cuda")) {
#if ZT_HAVE_CUDA
    const bool usable = zt::cuda::device_count() > 0;
    const std::string why = zt::cuda::unavailable_reason();
#else
    const bool usable = false;
    const std::string why = "this build has no CUDA backend";
#endif
    if (!usable) {
      if (rank == 0) std::printf("skipped: no usable GPU (%s)\n", why.c_str());
      MPI_Finalize();
      return 77;
    }
  }
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
