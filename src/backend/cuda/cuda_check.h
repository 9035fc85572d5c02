// Check macros for the CUDA libraries: a failed call throws zt::Error with file:line, the call,
// and the library's own name and text for the status (cudaGetErrorName/String,
// cublasLtGetStatusString).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

#define ZT_CUDA_CHECK(expr, ...)                                                                          \
  do {                                                                                                    \
    const cudaError_t zt_cuda_status_ = (expr);                                                           \
    if (zt_cuda_status_ != cudaSuccess)                                                                   \
      ::zt::throw_error(__FILE__, __LINE__,                                                               \
                        ::zt::cat(#expr " failed: ", cudaGetErrorName(zt_cuda_status_), ": ",             \
                                  cudaGetErrorString(zt_cuda_status_), " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

/// After a kernel launch: a bad configuration shows up in cudaGetLastError, not in the launch.
#define ZT_CUDA_CHECK_LAUNCH(kernel_name) ZT_CUDA_CHECK(cudaGetLastError(), "launching ", kernel_name)

#define ZT_CUBLAS_CHECK(expr, ...)                                                                        \
  do {                                                                                                    \
    const cublasStatus_t zt_cublas_status_ = (expr);                                                      \
    if (zt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::zt::throw_error(__FILE__, __LINE__,                                                               \
                        ::zt::cat(#expr " failed: ", cublasLtGetStatusString(zt_cublas_status_),           \
                                  " " __VA_OPT__(, ) __VA_ARGS__));                                       \
  } while (0)
