// ZeRO-Infinity for parameters (offload_param.device = nvme, stage 3): the rank's 16-bit
// parameter partition lives in a swap file, except its first max_in_cpu elements, which stay in
// host memory. Slices are read into buffer_count aligned buffers of up to buffer_size elements,
// ahead of use when the gatherer prefetches; a buffer keeps its slice after release, so a unit
// gathered again before the step is not read again. Writes (the optimizer's updated
// parameters) go straight to the file and drop what the buffers cached of that range.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"
#include "offload/aio_engine.h"
#include "offload/optimizer_offload.h"
#include "offload/param_store.h"
#include "offload/swap_file.h"

namespace zt {

class ParamSwapper final : public ParamStore {
 public:
  /// What a ParamSwapper with these arguments allocates: the resident elements in host memory,
  /// the rest in the file, and its read buffers when it has a file.
  static OffloadFootprint footprint(const OffloadConfig& config, size_t count, DType dtype, size_t largest_slice);

  /// `count` elements of `dtype`; `largest_slice`: the most elements one acquire asks for (a
  /// UsageError if buffer_size is smaller).
  ParamSwapper(Backend& backend, const OffloadConfig& config, const AioConfig& aio, size_t count, DType dtype,
               size_t largest_slice, int rank);
  ~ParamSwapper() override;

  const void* acquire(size_t lo, size_t hi) override;
  void release(const void* data) override;
  void prefetch(size_t lo, size_t hi) override;
  void write(size_t lo, size_t n, const void* src) override;
  bool can_acquire() const override;
  bool reuses_buffers() const override { return true; }

  size_t resident_elements() const { return resident_; }
  size_t nvme_bytes() const { return file_ ? file_->bytes() : 0; }
  size_t host_bytes() const { return resident_data_.bytes(); }
  size_t buffer_bytes() const;
  /// Slices read from the file so far (a test sees prefetching and caching work).
  size_t reads() const { return reads_; }

 private:
  struct Buffer {
    DeviceArray<unsigned char> data;
    size_t lo = 0, hi = 0;  // the cached slice; lo == hi: empty
    const unsigned char* view = nullptr;  // where element lo sits in `data`
    std::shared_ptr<AioTransfer> io;
    bool in_use = false;
    uint64_t last_use = 0;
  };
  Buffer* find(size_t lo, size_t hi);
  Buffer* take_free();
  /// Starts filling `b` with [lo, hi) (file part read asynchronously, resident part copied).
  void fill(Buffer& b, size_t lo, size_t hi);

  Backend& backend_;
  const DType dtype_;
  const size_t elem_, count_, resident_, capacity_;
  DeviceArray<unsigned char> resident_data_;
  std::unique_ptr<AioEngine> aio_;
  std::unique_ptr<SwapFile> file_;
  std::vector<Buffer> buffers_;
  uint64_t clock_ = 0;
  size_t reads_ = 0;
};

}  // namespace zt
