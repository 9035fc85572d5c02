// CommBuffer: a buffer that the data communicator's all-reduce and reduce-scatter read in place on
// the other ranks when it can (DataComm::allocate_shared: shared memory on one node, issue 17),
// else a DeviceArray from the backend's pool. The engine keeps the buffers it reduces (its
// gradients and their buckets) in one, so that on one node the collectives skip their staging
// copies. Shared memory is charged to the pool it stands in for, so pool_peak_bytes and the
// memory estimates read the same either way; the bytes also show in the node's /dev/shm.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "core/memory_pool.h"

namespace zt {

class CommBuffer {
 public:
  CommBuffer() = default;
  /// Collective over `comm`'s ranks: every rank constructs its CommBuffers in the same order.
  CommBuffer(DataComm& comm, Backend& backend, size_t bytes, Pool pool = Pool::kDevice)
      : shared_(comm.allocate_shared(bytes)), pool_(pool) {
    if (shared_) pool_counter(pool_).add(shared_->bytes());
    else local_ = DeviceArray<unsigned char>(backend, bytes, pool);
  }
  /// Private: a DeviceArray, not collective.
  CommBuffer(Backend& backend, size_t bytes, Pool pool = Pool::kDevice) : local_(backend, bytes, pool), pool_(pool) {}
  ~CommBuffer() { reset(); }
  CommBuffer(CommBuffer&& o) noexcept { *this = std::move(o); }
  CommBuffer& operator=(CommBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      shared_ = std::move(o.shared_);
      local_ = std::move(o.local_);
      pool_ = o.pool_;
    }
    return *this;
  }

  unsigned char* data() { return shared_ ? shared_->data() : local_.data(); }
  const unsigned char* data() const { return shared_ ? shared_->data() : local_.data(); }
  size_t bytes() const { return shared_ ? shared_->bytes() : local_.bytes(); }
  /// In shared memory (the peers read it in place).
  bool shared() const { return shared_ != nullptr; }

 private:
  void reset() {
    if (shared_) pool_counter(pool_).sub(shared_->bytes());
    shared_.reset();  // collective where shared (ShmComm frees a window): the same order on every rank
    local_.reset();
  }

  std::unique_ptr<SharedBuffer> shared_;
  DeviceArray<unsigned char> local_;
  Pool pool_ = Pool::kDevice;
};

}  // namespace zt
