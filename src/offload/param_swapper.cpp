#include "offload/param_swapper.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace zt {

namespace {

size_t align_down(size_t x, size_t a) { return x / a * a; }

// Whole pages stay in memory, so every file offset is page-aligned for O_DIRECT.
size_t resident_for(const OffloadConfig& config, size_t count, DType dtype) {
  return std::min(count, align_down(size_t(config.max_in_cpu), kDirectAlignment / dtype_size(dtype)));
}

size_t file_bytes_for(size_t count, size_t resident, size_t elem) {
  return count > resident ? (align_up(count, kDirectAlignment / elem) - resident) * elem : 0;
}

// A read buffer holds the largest slice with room to align both ends for O_DIRECT.
size_t read_buffer_bytes(size_t largest_slice, size_t elem) {
  return align_up(largest_slice * elem) + 3 * kDirectAlignment;
}

}  // namespace

OffloadFootprint ParamSwapper::footprint(const OffloadConfig& config, size_t count, DType dtype,
                                         size_t largest_slice) {
  OffloadFootprint f;
  const size_t elem = dtype_size(dtype), resident = resident_for(config, count, dtype);
  f.host_state = resident * elem;
  const size_t file = file_bytes_for(count, resident, elem);
  if (file > 0) {
    f.nvme = align_up(file);  // SwapFile's size
    f.buffers = size_t(config.buffer_count) * read_buffer_bytes(largest_slice, elem);
  }
  return f;
}

ParamSwapper::ParamSwapper(Backend& backend, const OffloadConfig& config, const AioConfig& aio, size_t count,
                           DType dtype, size_t largest_slice, int rank)
    : backend_(backend), dtype_(dtype), elem_(dtype_size(dtype)), count_(count),
      resident_(resident_for(config, count, dtype)),
      capacity_(largest_slice) {
  const std::string key = "zero_optimization.offload_param";
  if (size_t(config.buffer_size) < largest_slice) {
    throw UsageError(cat(key, ".buffer_size: ", config.buffer_size, " elements is smaller than the largest parameter ",
                         "slice this rank reads at once (", largest_slice, "); raise it"));
  }
  const Pool pool = config.pin_memory ? Pool::kPinned : Pool::kHost;
  resident_data_ = DeviceArray<unsigned char>(backend, resident_ * elem_, pool);
  if (count_ > resident_) {
    file_ = std::make_unique<SwapFile>(config.nvme_path, cat("rank", rank, "-params"), file_bytes_for(count_, resident_, elem_),
                                       key + ".nvme_path");
    aio_ = std::make_unique<AioEngine>(aio);
    buffers_.resize(size_t(config.buffer_count));
    for (Buffer& b : buffers_) {
      b.data = DeviceArray<unsigned char>(backend, read_buffer_bytes(capacity_, elem_), pool);
    }
  }
}

ParamSwapper::~ParamSwapper() {
  for (Buffer& b : buffers_) {
    if (b.io) {
      try {
        b.io->wait();
      } catch (const Error&) {
      }
    }
  }
}

size_t ParamSwapper::buffer_bytes() const {
  size_t total = 0;
  for (const Buffer& b : buffers_) total += b.data.bytes();
  return total;
}

ParamSwapper::Buffer* ParamSwapper::find(size_t lo, size_t hi) {
  for (Buffer& b : buffers_) {
    if (b.lo == lo && b.hi == hi && lo < hi) return &b;
  }
  return nullptr;
}

ParamSwapper::Buffer* ParamSwapper::take_free() {
  Buffer* best = nullptr;
  for (Buffer& b : buffers_) {
    if (!b.in_use && (!best || b.last_use < best->last_use)) best = &b;
  }
  return best;
}

bool ParamSwapper::can_acquire() const {
  return std::any_of(buffers_.begin(), buffers_.end(), [](const Buffer& b) { return !b.in_use; }) || buffers_.empty();
}

void ParamSwapper::fill(Buffer& b, size_t lo, size_t hi) {
  if (b.io) b.io->wait();
  b.io.reset();
  // The file part [a, hi) is read page-aligned; a resident prefix [lo, a) is copied in front.
  const size_t a = std::max(lo, resident_);
  const size_t off = (a - resident_) * elem_, end = (hi - resident_) * elem_;
  const size_t file_lo = align_down(off, kDirectAlignment), file_hi = align_up(end);
  const size_t prefix = (a - lo) * elem_, at = align_up(prefix);
  b.view = b.data.data() + at + (off - file_lo) - prefix;
  if (prefix > 0) std::memcpy(const_cast<unsigned char*>(b.view), resident_data_.data() + lo * elem_, prefix);
  b.io = aio_->read(file_->fd(), file_->path(), b.data.data() + at, file_hi - file_lo, file_lo);
  b.lo = lo;
  b.hi = hi;
  ++reads_;
}

const void* ParamSwapper::acquire(size_t lo, size_t hi) {
  ZT_CHECK(lo <= hi && hi <= count_, "parameter slice [", lo, ", ", hi, ") outside the partition of ", count_);
  if (hi <= resident_ || lo == hi) return resident_data_.data() + std::min(lo, resident_) * elem_;
  ZT_CHECK(hi - lo <= capacity_, "parameter slice of ", hi - lo, " elements exceeds the buffers' ", capacity_);
  Buffer* b = find(lo, hi);
  if (!b) {
    b = take_free();
    ZT_CHECK(b != nullptr, "all ", buffers_.size(), " offload_param buffers are in use");
    fill(*b, lo, hi);
  }
  if (b->io) b->io->wait();
  b->io.reset();
  b->in_use = true;
  return b->view;
}

void ParamSwapper::release(const void* data) {
  for (Buffer& b : buffers_) {
    if (b.in_use && b.view == data) {
      b.in_use = false;
      b.last_use = ++clock_;
      return;
    }
  }
}

void ParamSwapper::prefetch(size_t lo, size_t hi) {
  if (hi <= resident_ || hi - lo > capacity_ || find(lo, hi)) return;
  Buffer* b = take_free();
  if (b) fill(*b, lo, hi);
}

void ParamSwapper::write(size_t lo, size_t n, const void* src) {
  const size_t hi = lo + n;
  ZT_CHECK(hi <= count_, "parameter write [", lo, ", ", hi, ") outside the partition of ", count_);
  const auto* in = static_cast<const unsigned char*>(src);
  if (lo < resident_) std::memcpy(resident_data_.data() + lo * elem_, in, (std::min(hi, resident_) - lo) * elem_);
  if (hi <= resident_) return;
  const size_t a = std::max(lo, resident_);
  // Cached copies of this range are stale now.
  for (Buffer& b : buffers_) {
    if (b.lo < hi && a < b.hi) {
      ZT_CHECK(!b.in_use, "parameters [", b.lo, ", ", b.hi, ") are written while in use");
      if (b.io) b.io->wait();
      b.io.reset();
      b.lo = b.hi = 0;
    }
  }
  const unsigned char* part = in + (a - lo) * elem_;
  const size_t off = (a - resident_) * elem_, len = (hi - a) * elem_;
  // Whole pages straight from the source when it is page-aligned; a partial first or last page
  // (read, patched, written back) and a misaligned source go through one page-sized bounce
  // buffer at a time, so a write never needs more than a page of extra memory.
  const size_t page = kDirectAlignment;
  DeviceArray<unsigned char> bounce;
  for (size_t pos = off; pos < off + len;) {
    const size_t page_lo = align_down(pos, page), page_end = std::min(off + len, page_lo + page);
    const unsigned char* src = part + (pos - off);
    if (pos == page_lo && reinterpret_cast<uintptr_t>(src) % page == 0 && off + len - pos >= page) {
      const size_t run = align_down(off + len - pos, page);  // whole pages
      aio_->write(file_->fd(), file_->path(), src, run, pos)->wait();
      pos += run;
      continue;
    }
    if (bounce.size() == 0) bounce = DeviceArray<unsigned char>(backend_, page, Pool::kHost);
    if (pos != page_lo || page_end != page_lo + page) {
      aio_->read(file_->fd(), file_->path(), bounce.data(), page, page_lo)->wait();
    }
    std::memcpy(bounce.data() + (pos - page_lo), src, page_end - pos);
    aio_->write(file_->fd(), file_->path(), bounce.data(), page, page_lo)->wait();
    pos = page_end;
  }
}

}  // namespace zt
