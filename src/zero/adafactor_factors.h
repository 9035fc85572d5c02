// Adafactor's factored second moments under ZeRO. Each matrix (a 2-D tensor, HF's stored shape)
// keeps a row factor (the moving average of its rows' mean g^2) and a column factor, rows + cols
// floats instead of rows x cols. A row's mean spans every column, and ZeRO's flat partitions cut
// matrices anywhere: each rank sums g^2 over the pieces it holds, and one all-reduce of every
// matrix's row and column sums (rows + cols floats a matrix, small beside the model) gives every
// rank the whole sums. Every rank then updates every factor alike, so the factors are replicated,
// never partitioned: any rank can step any piece, and a checkpoint holds them once per shard
// whatever the world size. DeepSpeed hands its optimizers flat 1-D partitions under ZeRO, where
// torch.optim.Adafactor keeps a full per-element second moment instead (measured in the README).
//
// The factors and the sums live in device memory; with an offloaded optimizer a host copy of
// the scaled rows and columns serves the CPU's passes, and the CPU's sums go up through
// host_sums().
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "backend/optimizer_ops.h"
#include "model/param_layout.h"

namespace zt {

class AdafactorFactors {
 public:
  /// The matrices' total rows and columns.
  static std::pair<size_t, size_t> extent(const std::vector<TensorShape>& shapes);
  /// Device bytes: the factors (state) and the sums and scaled rows (buffers), and the device
  /// arrays one by one (state first); host bytes of the copies an offloaded part needs.
  static size_t state_bytes(const std::vector<TensorShape>& shapes);
  static size_t buffer_bytes(const std::vector<TensorShape>& shapes);
  static std::vector<size_t> device_allocations(const std::vector<TensorShape>& shapes);
  static size_t host_copy_bytes(const std::vector<TensorShape>& shapes);

  /// `host_copies`: the optimizer has an offloaded part, stepped by the CPU.
  AdafactorFactors(Backend& backend, const std::vector<TensorShape>& shapes, bool host_copies);

  bool factored(size_t tensor) const { return offsets_[tensor].first != kNone; }
  /// The sums of every matrix (all row sums, then all column sums), fp32 on the device: what
  /// the ranks all-reduce.
  float* sums() { return sums_.data(); }
  size_t sum_count() const { return sums_.size(); }
  /// Tensor t's row and column sums in `base` (sums(), or host_sums()).
  float* row_sums(float* base, size_t t) { return base + offsets_[t].first; }
  float* col_sums(float* base, size_t t) { return base + rows_ + offsets_[t].second; }
  /// Host memory of sums()' layout, for the offloaded part's sums (host_copies only).
  float* host_sums() { return host_sums_.data(); }

  /// Every factor's moving average from the whole sums, then the scaled rows; and their host
  /// copies. On the compute stream.
  void update(const OptimizerStepArgs& args);
  /// The second moment of tensor t from its element `first` on, on the device or on the host.
  AdafactorMoment moment(size_t t, size_t first);
  AdafactorMoment host_moment(size_t t, size_t first);

  /// The factors, rows then columns (extent()), to or from host memory; zero() starts them anew.
  void read(float* rows, float* cols);
  void load(const float* rows, const float* cols);
  void zero();

 private:
  static constexpr size_t kNone = size_t(-1);
  /// Tensor t's moment in the arrays given (the device's, or the host copies).
  AdafactorMoment moment_in(const float* scaled_row, const float* col, size_t t, size_t first) const;
  Backend& backend_;
  OptimizerOps& ops_;
  std::vector<TensorShape> shapes_;
  std::vector<std::pair<size_t, size_t>> offsets_;  // per tensor: its first row and column, or kNone
  size_t rows_ = 0, cols_ = 0;
  DeviceArray<float> row_, col_;            // the state
  DeviceArray<float> sums_, scaled_row_;    // the step's sums (rows, then columns); row / mean(row)
  DeviceArray<float> host_sums_, host_scaled_row_, host_col_;  // host copies, with an offloaded part
};

}  // namespace zt
