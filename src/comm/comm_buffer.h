// CommBuffer: a buffer that the data communicator's all-reduce and reduce-scatter read in place on
// the other ranks when it can (DataComm::allocate_shared: shared memory on one node, issue 17),
// else a DeviceArray from the backend's pool. The engine keeps the buffers it reduces (its
// gradients and their buckets) in one, so that on one node the collectives skip their staging
// copies, and nothing else changes: the bytes are the same, on the same device.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/device_array.h"
#include "comm/data_comm.h"

namespace zt {

class CommBuffer {
 public:
  CommBuffer() = default;
  /// Collective over `comm`'s ranks: every rank constructs its CommBuffers in the same order.
  CommBuffer(DataComm& comm, Backend& backend, size_t bytes, Pool pool = Pool::kDevice)
      : shared_(comm.allocate_shared(bytes)) {
    if (!shared_) local_ = DeviceArray<unsigned char>(backend, bytes, pool);
  }
  /// Private: a DeviceArray, not collective.
  CommBuffer(Backend& backend, size_t bytes, Pool pool = Pool::kDevice) : local_(backend, bytes, pool) {}
  unsigned char* data() { return shared_ ? shared_->data() : local_.data(); }
  const unsigned char* data() const { return shared_ ? shared_->data() : local_.data(); }
  size_t bytes() const { return shared_ ? shared_->bytes() : local_.bytes(); }
  /// In shared memory (the peers read it in place).
  bool shared() const { return shared_ != nullptr; }

 private:
  std::unique_ptr<SharedBuffer> shared_;
  DeviceArray<unsigned char> local_;
};

}  // namespace zt
