// What the CUDA kernels share with the backend that owns them: the device, the compute stream,
// the cuBLASLt handle and its workspace, and a scratch buffer. Kernels enqueue on `compute` and
// never synchronise the host.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "backend/kernel_ops.h"
#include "backend/optimizer_ops.h"
#include "core/dtype.h"

namespace zt::cuda {

struct CudaContext {
  int device = 0;
  int sm_count = 0;
  cudaStream_t compute = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // device memory for cuBLASLt's split-K and friends
  size_t lt_workspace_bytes = 0;
  /// Device memory of at least `bytes` for the temporaries of one kernel call on `compute`; valid
  /// until the next call. Growing it lets the compute stream's earlier work finish first.
  std::function<void*(size_t bytes)> scratch;
};

/// KernelOps<float> on the device: cuBLASLt GEMMs (fp32, TF32 off unless set_allow_tf32) and .cu kernels.
std::unique_ptr<KernelOps<float>> make_cuda_kernels(CudaContext& ctx);
/// KernelOps<bf16> on the device (cuda_kernels_bf16.cu): bf16 activations, cuBLASLt bf16 GEMMs
/// with fp32 accumulation, fp32 statistics and parameter gradients, each bf16 output rounded once.
std::unique_ptr<KernelOps<bf16>> make_cuda_kernels_bf16(CudaContext& ctx);
/// OptimizerOps on device buffers: the fused Adam/AdamW, sum of squares, accumulation, zero.
std::unique_ptr<OptimizerOps> make_cuda_optimizer_ops(CudaContext& ctx);

/// dst[i] = src[i] converted between dtypes (round to nearest even), on `stream`; same contract as
/// Backend::cast_async.
void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, cudaStream_t stream);

}  // namespace zt::cuda
