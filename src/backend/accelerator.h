// --accelerator auto|cpu|emulated|cuda: which Backend a rank runs on.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace zt {

/// The accelerator names --accelerator accepts.
inline constexpr const char* kAcceleratorChoices = "auto, cpu, emulated, cuda";

/// The backend for `accelerator`, bound to the device of this rank's node-local rank where there
/// are devices. auto: cuda when this build has CUDA and a GPU is visible, else cpu. A name this
/// build or machine cannot serve is a UsageError naming `flag`.
std::unique_ptr<Backend> make_backend(const std::string& accelerator, int local_rank, const std::string& flag);

}  // namespace zt
