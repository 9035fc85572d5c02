// ZeRO-Offload and ZeRO-Infinity for the optimizer: the fp32 master weights and the optimizer's
// moments (Adam's two, Lion's or Adagrad's one) of a rank's range live in host memory
// (offload_optimizer.device = cpu; the `pinned` pool when pin_memory is set) or in a per-rank file
// under nvme_path (device = nvme), and the CPU steps them.
//
// The state is walked in sub_group_size pieces. On NVMe each piece is one contiguous record
// [master | exp_avg | exp_avg_sq] in the swap file (the moments the optimizer keeps), and the
// walk is a pipeline over buffer_count aligned buffers: while piece k is stepped, pieces
// k+1 .. k+buffer_count-2 are being read and piece k-1 is being written. The first pieces are
// read during backward (prefetch), and the last writes finish during the next forward. The
// gradient is never swapped: the step reads the 16-bit gradient where it is, and writes the
// updated parameter (in the training dtype) into one of two staging buffers, which is copied to
// the device on the offload's own stream while the CPU steps the next piece into the other; an
// event per buffer says when it is free again.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"
#include "offload/aio_engine.h"
#include "offload/swap_file.h"

namespace zt {

/// One resident piece of the state: elements [lo, lo + n) of the offloaded range. A moment the
/// optimizer does not keep is null.
struct OffloadPiece {
  size_t lo = 0, n = 0;
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

/// What a walk does with the stored state: read it, replace it, or both.
enum class SwapMode { kRead, kWrite, kReadWrite };

/// Receives updated parameters: elements [lo, lo + n) of the offloaded range, in the training
/// dtype, from a page-aligned staging buffer. It enqueues the copy of `src` on `stream` (the
/// buffer is reused once that has run) or copies at once.
using ParamSink = std::function<void(size_t lo, size_t n, const void* src, Stream& stream)>;

/// What an offload component allocates, by where it lives (zero_estimate sizes a run from these;
/// the same rules size the real allocations).
struct OffloadFootprint {
  size_t host_state = 0;  ///< state kept in host memory (the component's host pool)
  size_t nvme = 0;        ///< bytes of its swap file
  size_t buffers = 0;     ///< swap and staging buffers (host pool)
};

class OptimizerOffload {
 public:
  /// What an OptimizerOffload with these arguments allocates.
  static OffloadFootprint footprint(const OffloadConfig& config, const OptimizerConfig& optimizer, size_t count,
                                    size_t sub_group_size, DType param_dtype);

  /// `count` elements of state for this rank (`rank` names its swap file).
  OptimizerOffload(Backend& backend, const OffloadConfig& config, const OptimizerConfig& optimizer,
                   const AioConfig& aio, size_t count, size_t sub_group_size, DType param_dtype, int rank);
  ~OptimizerOffload();

  size_t size() const { return count_; }
  /// Visits [lo, hi) in sub-group pieces, in order. kWrite promises `fn` overwrites every field
  /// of the piece (nothing is read); kRead discards changes.
  void visit(size_t lo, size_t hi, SwapMode mode, const std::function<void(const OffloadPiece&)>& fn);
  /// One optimizer step (args.rule) over the whole range on the CPU. `grad` (host-accessible, `grad_dtype`) starts
  /// at the range's first element; each piece's updated parameters go to `params`.
  void step(const OptimizerStepArgs& args, const void* grad, DType grad_dtype, const ParamSink& params);
  /// The same step writing the updated parameters into host memory `params` (the range's first
  /// element at its start) and nothing else: no stream, no event. The delayed parameter update
  /// runs it on its own thread while the caller's thread drives the device.
  void step_to_host(const OptimizerStepArgs& args, const void* grad, DType grad_dtype, void* params);
  /// Walks every piece (read, then written back): `fill` steps it however the caller's rule needs
  /// and writes its parameters into a free staging buffer, which then goes to `params` on the
  /// upload stream (Lamb's second pass).
  void send_params(SwapMode mode, const std::function<void(const OffloadPiece&, void* staging)>& fill,
                   const ParamSink& params);
  /// Sends the parameters rounded from the master weights to `params` (after a load).
  void copy_params_from_master(const ParamSink& params);
  /// Recorded when the last parameter copy of step or copy_params_from_master has been
  /// enqueued: whoever reads the parameters next waits for it.
  Event& params_written() { return *params_written_; }
  /// NVMe: starts reading the first pieces of the next step into the swap buffers (the engine
  /// calls it as the last backward of a step begins, so those reads overlap backward).
  void prefetch();
  /// NVMe: waits for every write in flight (a walk returns with its last writes still running;
  /// they finish during the next forward). Throws the first I/O error.
  void flush();

  /// Bytes of state held in host memory (0 on NVMe), in the swap file, and in swap/staging buffers.
  size_t host_state_bytes() const { return (master_.bytes() + exp_avg_.bytes() + exp_avg_sq_.bytes()); }
  /// fp32 fields per element: the master weight and the optimizer's moments.
  size_t fields() const { return 1 + size_t(has_exp_avg_) + size_t(has_exp_avg_sq_); }
  size_t nvme_bytes() const { return file_ ? file_->bytes() : 0; }
  size_t buffer_bytes() const;
  Pool host_pool() const { return host_pool_; }
  bool on_nvme() const { return file_ != nullptr; }

 private:
  struct SwapBuffer {
    DeviceArray<unsigned char> data;
    std::shared_ptr<AioTransfer> io;  // the read or write in flight on it
    size_t piece = SIZE_MAX;
  };
  /// Elements [lo, lo + n) of the offloaded range.
  struct PieceRange {
    size_t lo, n;
  };
  /// Piece k's elements, without a buffer: the walk plans with these.
  PieceRange piece_range(size_t k) const;
  /// Piece k laid out in the swap buffer `base`: [master | exp_avg | exp_avg_sq], the moments kept.
  OffloadPiece piece_view(size_t k, unsigned char* base) const;
  size_t piece_count() const { return (count_ + piece_elements_ - 1) / piece_elements_; }
  size_t piece_bytes(size_t k) const;
  void visit_nvme(size_t lo, size_t hi, SwapMode mode, const std::function<void(const OffloadPiece&)>& fn);
  /// Stages piece k in its buffer (k % buffers), reading it when `need_data`.
  void start_read(size_t k, bool need_data);
  /// The step over piece `p`: its gradient from `grad` (the range's first element at its start), its
  /// updated parameters to `param`.
  void step_piece(const OptimizerStepArgs& args, const OffloadPiece& p, const void* grad, DType grad_dtype,
                  void* param);

  Backend& backend_;
  OptimizerOps& host_ops_;
  const size_t count_, piece_elements_;
  const bool has_exp_avg_, has_exp_avg_sq_;  // the moments the optimizer keeps
  const DType param_dtype_;
  const Pool host_pool_;
  // Host memory (device = cpu).
  DeviceArray<float> master_, exp_avg_, exp_avg_sq_;
  // NVMe (device = nvme).
  std::unique_ptr<AioEngine> aio_;
  std::unique_ptr<SwapFile> file_;
  size_t slot_bytes_ = 0;  // file bytes per piece, aligned
  std::vector<SwapBuffer> buffers_;
  // Updated parameters of a piece on their way to the device, double-buffered.
  struct Staging {
    DeviceArray<unsigned char> data;
    std::unique_ptr<Event> free;  // the copy out of it has run
  };
  Staging staging_[2];
  std::unique_ptr<Stream> upload_;
  std::unique_ptr<Event> params_written_;
};

}  // namespace zt
