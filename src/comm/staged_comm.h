// The host-staged data communicator: collectives on device buffers moved through pinned memory
// by a host communicator (device -> pinned -> MPI -> device), all of it on the communicator's own
// stream. Used by backends whose device memory the host cannot address (the emulated device;
// a GPU when NCCL cannot serve, such as several ranks on one GPU).
#pragma once

#include <memory>

#include "comm/data_comm.h"

namespace zt {

/// `transport` must be used by nobody else: the communication stream's thread issues on it.
std::unique_ptr<DataComm> make_staged_comm(Backend& backend, std::unique_ptr<HostComm> transport);

}  // namespace zt
