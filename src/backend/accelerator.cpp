#include "backend/accelerator.h"

#include "backend/emulated/emulated_backend.h"
#include "core/error.h"

namespace zt {

std::unique_ptr<Backend> make_backend(const std::string& accelerator, int local_rank, const std::string& flag) {
  (void)local_rank;  // one device per node-local rank once there are devices (the CUDA backend)
  if (accelerator == "cpu" || accelerator == "auto") return make_cpu_backend();
  if (accelerator == "emulated") return make_emulated_backend();
  if (accelerator == "cuda") {
    throw UsageError(cat(flag, " cuda: this zerotrain was built without the CUDA backend"));
  }
  throw UsageError(cat(flag, " \"", accelerator, "\": choose one of ", kAcceleratorChoices));
}

}  // namespace zt
