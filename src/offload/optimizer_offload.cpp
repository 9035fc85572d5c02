#include "offload/optimizer_offload.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace zt {

namespace {

// Pieces are whole multiples of 2048 elements, so that every piece's parameters start on a
// page in a parameter swap file (2048 x 2 bytes) and its state on a page in its own.
size_t pieces_for(size_t count, int64_t sub_group_size) {
  const size_t piece = std::min(count, size_t(sub_group_size));
  return std::max<size_t>(2048, (piece + 2047) / 2048 * 2048);
}

/// File bytes per piece: [master | the moments kept], aligned for O_DIRECT.
size_t slot_bytes_for(size_t piece_elements, size_t fields) {
  return align_up(fields * piece_elements * sizeof(float));
}

size_t fields_of(const OptimizerConfig& optimizer) { return 1 + size_t(optimizer.moment_count()); }

/// NVMe swap buffers: a pipeline of buffer_count, never more than the pieces (+2) can use.
size_t swap_buffers_for(const OffloadConfig& config, size_t pieces) {
  return size_t(std::min<int64_t>(config.buffer_count, int64_t(pieces) + 2));
}

}  // namespace

OffloadFootprint OptimizerOffload::footprint(const OffloadConfig& config, const OptimizerConfig& optimizer,
                                             size_t count, size_t sub_group_size, DType param_dtype) {
  OffloadFootprint f;
  if (count == 0) return f;
  const size_t piece = pieces_for(count, int64_t(sub_group_size)), pieces = (count + piece - 1) / piece;
  f.buffers = 2 * piece * dtype_size(param_dtype);  // the double-buffered parameter staging
  if (config.device == OffloadConfig::Device::kCpu) {
    f.host_state = fields_of(optimizer) * count * sizeof(float);
  } else {
    const size_t slot = slot_bytes_for(piece, fields_of(optimizer));
    f.nvme = align_up(slot * pieces);  // SwapFile's size
    f.buffers += swap_buffers_for(config, pieces) * slot;
  }
  return f;
}

OptimizerOffload::OptimizerOffload(Backend& backend, const OffloadConfig& config, const OptimizerConfig& optimizer,
                                   const AioConfig& aio, size_t count, size_t sub_group_size, DType param_dtype,
                                   int rank)
    : backend_(backend), host_ops_(host_optimizer_ops()), count_(count),
      piece_elements_(pieces_for(count, int64_t(sub_group_size))), has_exp_avg_(optimizer.has_exp_avg()),
      has_exp_avg_sq_(optimizer.has_exp_avg_sq() && !optimizer.factored()), param_dtype_(param_dtype),
      host_pool_(config.pin_memory ? Pool::kPinned : Pool::kHost) {
  ZT_CHECK(config.enabled(), "optimizer offload without a device");
  if (config.device == OffloadConfig::Device::kCpu) {
    master_ = DeviceArray<float>(backend, count, host_pool_);
    if (has_exp_avg_) {
      exp_avg_ = DeviceArray<float>(backend, count, host_pool_);
      host_ops_.zero(exp_avg_.data(), DType::kF32, count);
    }
    if (has_exp_avg_sq_) {
      exp_avg_sq_ = DeviceArray<float>(backend, count, host_pool_);
      host_ops_.zero(exp_avg_sq_.data(), DType::kF32, count);
    }
  } else {
    const std::string key = "zero_optimization.offload_optimizer";
    if (config.buffer_count < 3) {
      throw UsageError(cat(key, ".buffer_count: ", config.buffer_count,
                           " is too few for NVMe: one piece is read, one stepped and one written at a time (need >= 3)"));
    }
    slot_bytes_ = slot_bytes_for(piece_elements_, fields());
    file_ = std::make_unique<SwapFile>(config.nvme_path, cat("rank", rank, "-optimizer"), slot_bytes_ * piece_count(),
                                       key + ".nvme_path");
    aio_ = std::make_unique<AioEngine>(aio);
    buffers_.resize(swap_buffers_for(config, piece_count()));
    for (SwapBuffer& b : buffers_) b.data = DeviceArray<unsigned char>(backend, slot_bytes_, host_pool_);
    // Nothing to write yet: reserved (fallocated) blocks read back as zeros, which is what fresh
    // moments are, and the engine's init or load writes every piece before the first step.
  }
  for (Staging& st : staging_) {
    st.data = DeviceArray<unsigned char>(backend, piece_elements_ * dtype_size(param_dtype), host_pool_);
    st.free = backend.create_event();
  }
  upload_ = backend.create_stream("offload upload");
  params_written_ = backend.create_event();
}

OptimizerOffload::~OptimizerOffload() {
  // Writes still in flight reference the buffers: let them finish before the memory goes.
  try {
    flush();
  } catch (const Error&) {
  }
}

size_t OptimizerOffload::buffer_bytes() const {
  size_t total = staging_[0].data.bytes() + staging_[1].data.bytes();
  for (const SwapBuffer& b : buffers_) total += b.data.bytes();
  return total;
}

OptimizerOffload::PieceRange OptimizerOffload::piece_range(size_t k) const {
  const size_t lo = k * piece_elements_;
  return {lo, std::min(piece_elements_, count_ - lo)};
}

size_t OptimizerOffload::piece_bytes(size_t k) const {
  return align_up(fields() * piece_range(k).n * sizeof(float));
}

OffloadPiece OptimizerOffload::piece_view(size_t k, unsigned char* base) const {
  const PieceRange r = piece_range(k);
  float* f = reinterpret_cast<float*>(base);
  OffloadPiece p{r.lo, r.n, f, nullptr, nullptr};
  if (has_exp_avg_) p.exp_avg = f += r.n;
  if (has_exp_avg_sq_) p.exp_avg_sq = f += r.n;
  return p;
}

void OptimizerOffload::visit(size_t lo, size_t hi, SwapMode mode, const std::function<void(const OffloadPiece&)>& fn) {
  ZT_CHECK(lo <= hi && hi <= count_, "offloaded range [", lo, ", ", hi, ") outside [0, ", count_, ")");
  if (lo == hi) return;
  if (file_) return visit_nvme(lo, hi, mode, fn);
  for (size_t a = lo; a < hi; a += piece_elements_) {
    OffloadPiece p;
    p.lo = a;
    p.n = std::min(piece_elements_, hi - a);
    p.master = master_.data() + a;
    if (has_exp_avg_) p.exp_avg = exp_avg_.data() + a;
    if (has_exp_avg_sq_) p.exp_avg_sq = exp_avg_sq_.data() + a;
    fn(p);
  }
}

// Buffer k % nbuf is the only place piece k is ever staged, so a buffer that still holds a
// piece is a cache of it: newer than the file while its write is in flight, and reused without
// a read when the piece comes round again (prefetched, or the last pieces of the previous walk).
void OptimizerOffload::start_read(size_t k, bool need_data) {
  SwapBuffer& b = buffers_[k % buffers_.size()];
  if (b.piece == k) return;  // staged already (read in flight, written, or cached)
  if (b.io) b.io->wait();    // the previous piece's write must land before the buffer is reused
  b.io.reset();
  b.piece = k;
  if (need_data) b.io = aio_->read(file_->fd(), file_->path(), b.data.data(), piece_bytes(k), k * slot_bytes_);
}

void OptimizerOffload::prefetch() {
  if (!file_) return;
  for (size_t k = 0; k < std::min(buffers_.size(), piece_count()); ++k) start_read(k, true);
}

void OptimizerOffload::flush() {
  for (SwapBuffer& b : buffers_) {
    if (b.io) b.io->wait();
    b.io.reset();
  }
}

void OptimizerOffload::visit_nvme(size_t lo, size_t hi, SwapMode mode,
                                  const std::function<void(const OffloadPiece&)>& fn) {
  const size_t first = lo / piece_elements_, last = (hi - 1) / piece_elements_ + 1;
  const size_t nbuf = buffers_.size(), ahead = nbuf - 2;
  auto whole = [&](size_t k) {
    const PieceRange r = piece_range(k);
    return lo <= r.lo && r.lo + r.n <= hi;
  };
  // While piece k is visited, pieces k+1 .. k+ahead are read and piece k-1 is written.
  size_t next_read = first;
  for (size_t k = first; k < last; ++k) {
    for (; next_read < last && next_read <= k + ahead; ++next_read) {
      start_read(next_read, !(mode == SwapMode::kWrite && whole(next_read)));
    }
    SwapBuffer& b = buffers_[k % nbuf];
    if (b.io) b.io->wait();
    b.io.reset();
    OffloadPiece p = piece_view(k, b.data.data());
    // Narrow to [lo, hi): the caller sees only the elements it asked for.
    const size_t a = std::max(lo, p.lo), z = std::min(hi, p.lo + p.n);
    const auto narrow = [&](float* f) { return f ? f + (a - p.lo) : nullptr; };
    OffloadPiece part{a, z - a, narrow(p.master), narrow(p.exp_avg), narrow(p.exp_avg_sq)};
    fn(part);
    if (mode != SwapMode::kRead) {
      b.io = aio_->write(file_->fd(), file_->path(), b.data.data(), piece_bytes(k), k * slot_bytes_);
    }
  }
  // The last writes finish while the next forward runs; whoever reuses a buffer waits for its
  // write first (and sees an I/O error there), and the buffers serve those pieces meanwhile.
}

void OptimizerOffload::send_params(SwapMode mode, const std::function<void(const OffloadPiece&, void* staging)>& fill,
                                   const ParamSink& params) {
  // The copies overwrite parameters the compute stream may still read.
  auto ready = backend_.create_event();
  backend_.record(*ready, backend_.compute_stream());
  backend_.wait(*upload_, *ready);
  size_t k = 0;
  visit(0, count_, mode, [&](const OffloadPiece& p) {
    Staging& st = staging_[k++ % 2];
    backend_.synchronize(*st.free);  // its previous piece has reached the device
    fill(p, st.data.data());
    params(p.lo, p.n, st.data.data(), *upload_);
    backend_.record(*st.free, *upload_);
  });
  backend_.record(*params_written_, *upload_);
}

void OptimizerOffload::step_piece(const OptimizerStepArgs& args, const OffloadPiece& p, const void* grad,
                                  DType grad_dtype, void* param) {
  const auto* g = static_cast<const unsigned char*>(grad) + p.lo * dtype_size(grad_dtype);
  host_ops_.step(args, p.master, p.exp_avg, p.exp_avg_sq, g, grad_dtype, param, param_dtype_, p.n);
}

void OptimizerOffload::step(const OptimizerStepArgs& args, const void* grad, DType grad_dtype,
                            const ParamSink& params) {
  send_params(SwapMode::kReadWrite, [&](const OffloadPiece& p, void* staging) {
    step_piece(args, p, grad, grad_dtype, staging);
  }, params);
}

void OptimizerOffload::step_to_host(const OptimizerStepArgs& args, const void* grad, DType grad_dtype, void* params) {
  auto* out = static_cast<unsigned char*>(params);
  visit(0, count_, SwapMode::kReadWrite, [&](const OffloadPiece& p) {
    step_piece(args, p, grad, grad_dtype, out + p.lo * dtype_size(param_dtype_));
  });
}

void OptimizerOffload::copy_params_from_master(const ParamSink& params) {
  send_params(SwapMode::kRead, [&](const OffloadPiece& p, void* staging) {
    convert(p.master, DType::kF32, staging, param_dtype_, p.n);
  }, params);
}

}  // namespace zt
