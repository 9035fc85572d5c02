// The CUDA backend: the Backend contract kept by a GPU. Device memory from a stream-aware caching
// allocator (caching_allocator.h) charged to the device pool, pinned host memory from
// cudaHostAlloc, streams and events as CUDA's own, copies through cudaMemcpyAsync, kernels in
// cuda_kernels.cu and cuda_optimizer_ops.cu, GEMMs through cuBLASLt.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backend/backend.h"

namespace zt::cuda {

/// GPUs this process can use; 0 without a driver or a device (never throws).
int device_count();
/// Why device_count() is 0, for skip messages and errors ("no CUDA driver: ..."); empty otherwise.
std::string unavailable_reason();

/// The CUDA stream behind a Stream made by the CUDA backend (throws zt::Error for any other).
cudaStream_t native_stream(Stream& stream);
/// The device a CUDA backend runs on (throws zt::Error for another backend).
int backend_device(Backend& backend);
/// The PCI bus id of `device` ("0000:65:00.0"): two ranks with the same one share a GPU.
std::string pci_bus_id(int device);

/// The kernels' context of a CUDA backend (throws zt::Error for another backend): for tests and
/// benchmarks that call cuBLASLt GEMMs in other dtypes (cublaslt_gemm.h).
struct CudaContext;
CudaContext& backend_context(Backend& backend);

/// The backend on GPU `device` (this process's current device from now on).
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace zt::cuda
