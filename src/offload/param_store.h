// Where a stage 3 rank's 16-bit parameter partition lives, behind one interface the parameter
// gatherer reads from and the optimizer writes to:
//   HostParamStore  in memory (the device pool, or host memory with offload_param.device = cpu)
//   ParamSwapper    on NVMe (offload_param.device = nvme), see param_swapper.h
// Offsets are elements of the partition (0 = the rank's first element).
#pragma once

#include <cstddef>

#include "backend/backend.h"
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
  /// Replaces elements [lo, lo + n) with `src` (host memory); done when it returns.
  virtual void write(size_t lo, size_t n, const void* src) = 0;
  /// True when acquire() hands out buffers of the store's own that it refills after release():
  /// a collective reading one must have finished (on the host) before it is released.
  virtual bool reuses_buffers() const { return false; }
};

/// The partition in one buffer of the backend's (device memory, or host memory with
/// offload_param.device = cpu): acquire hands out pointers into it for collectives to read.
class HostParamStore final : public ParamStore {
 public:
  HostParamStore(void* data, DType dtype, Backend& backend)
      : data_(static_cast<unsigned char*>(data)), elem_(dtype_size(dtype)), backend_(backend) {}
  const void* acquire(size_t lo, size_t) override { return data_ + lo * elem_; }
  void release(const void*) override {}
  void write(size_t lo, size_t n, const void* src) override { backend_.copy_from_host(data_ + lo * elem_, src, n * elem_); }

 private:
  unsigned char* data_;
  size_t elem_;
  Backend& backend_;
};

}  // namespace zt
