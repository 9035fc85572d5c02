// Where a stage 3 rank's 16-bit parameter partition lives, behind one interface the parameter
// gatherer reads from and the optimizer writes to:
//   HostParamStore  in memory (the device pool, or host memory with offload_param.device = cpu)
//   ParamSwapper    on NVMe (offload_param.device = nvme), see param_swapper.h
// Offsets are elements of the partition (0 = the rank's first element).
#pragma once

#include <cstddef>
#include <cstring>

#include "core/dtype.h"

namespace zt {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  /// Elements [lo, hi), readable until release(). May block on a read.
  virtual const void* acquire(size_t lo, size_t hi) = 0;
  virtual void release(const void* data) = 0;
  /// False when acquire() would find no buffer free: the caller must release one first.
  virtual bool can_acquire() const { return true; }
  /// Starts fetching [lo, hi) for a later acquire; nothing to do where the data is in memory.
  virtual void prefetch(size_t lo, size_t hi) { (void)lo, (void)hi; }
  /// Replaces elements [lo, lo + n) with `src`; done when it returns.
  virtual void write(size_t lo, size_t n, const void* src) = 0;
};

/// The partition in addressable memory.
class HostParamStore final : public ParamStore {
 public:
  HostParamStore(void* data, DType dtype) : data_(static_cast<unsigned char*>(data)), elem_(dtype_size(dtype)) {}
  const void* acquire(size_t lo, size_t) override { return data_ + lo * elem_; }
  void release(const void*) override {}
  void write(size_t lo, size_t n, const void* src) override { std::memcpy(data_ + lo * elem_, src, n * elem_); }

 private:
  unsigned char* data_;
  size_t elem_;
};

}  // namespace zt
