// An owning typed array allocated through a Backend from a pool, which names its memory kind:
// device (only the backend touches its bytes), host or pinned (the host may read and write them
// once the streams that use them are synchronised).
#pragma once

#include <cstddef>
#include <utility>

#include "backend/backend.h"

namespace zt {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Backend& backend, size_t count, Pool pool = Pool::kDevice)
      : backend_(&backend), pool_(pool), count_(count),
        data_(count ? static_cast<T*>(backend.allocate(pool, count * sizeof(T))) : nullptr) {}
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      pool_ = o.pool_;
      count_ = std::exchange(o.count_, 0);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void reset() {
    if (data_) backend_->deallocate(pool_, data_, count_ * sizeof(T));
    data_ = nullptr;
    count_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  Pool pool() const { return pool_; }

 private:
  Backend* backend_ = nullptr;
  Pool pool_ = Pool::kDevice;
  size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace zt
