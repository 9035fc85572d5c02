#include "backend/accelerator.h"

#include "backend/emulated/emulated_backend.h"
#include "core/error.h"
#if ZT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace zt {

namespace {

#if ZT_HAVE_CUDA
// One GPU per node-local rank. With fewer GPUs than ranks on a node (tests on a one-GPU machine,
// or a scheduler that shows each rank only its own GPU) ranks share them round-robin; the data
// communicator then stages through the host where two ranks share one (comm/data_comm.h).
std::unique_ptr<Backend> cuda_backend(int local_rank, const std::string& flag) {
  const int n = cuda::device_count();
  if (n == 0) throw UsageError(cat(flag, " cuda: no usable GPU (", cuda::unavailable_reason(), ")"));
  return cuda::make_cuda_backend(local_rank % n);
}
#endif

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& accelerator, int local_rank, const std::string& flag) {
  if (accelerator == "cpu") return make_cpu_backend();
  if (accelerator == "emulated") return make_emulated_backend();
#if ZT_HAVE_CUDA
  if (accelerator == "auto") {
    return cuda::device_count() > 0 ? cuda_backend(local_rank, flag) : make_cpu_backend();
  }
  if (accelerator == "cuda") return cuda_backend(local_rank, flag);
#else
  if (accelerator == "auto") return make_cpu_backend();
  if (accelerator == "cuda") {
    throw UsageError(cat(flag, " cuda: this zerotrain was built without the CUDA backend (ZT_CUDA=OFF or no nvcc)"));
  }
#endif
  throw UsageError(cat(flag, " \"", accelerator, "\": choose one of ", kAcceleratorChoices));
}

}  // namespace zt
