// 1-bit Adam's error-compensated compressed all-reduce (DeepSpeed's compressed_allreduce, from
// Tang et al., arXiv 2102.02888), over every tensor of a flat buffer at once. Each tensor is
// padded to a multiple of ranks x lcm(ranks, 8) elements (DeepSpeed's corrected_tensor_size, so
// that its scales are the same) and cut into one chunk per rank:
//   worker  x = m + e_worker; scale = ||x|| / sqrt(padded); signs of x (+1 for x >= 0);
//           e_worker = x - scale sign(x); chunk q's signs go to rank q (all-to-all, 1 bit an
//           element) and the scale to everyone (all-gather, one float a tensor)
//   server  rank r averages chunk r: y = sum_q scale_q sign_q / ranks + e_server, and compresses
//           it the same way (its own error, its own scale); every rank gathers every chunk's
//           signs and scale (all-gather)
//   result  m = scale_q sign for each element of chunk q: the same on every rank.
// So each rank sends 2 bits an element where an fp32 all-reduce sends 64 (ring, many ranks), and
// the errors carry what the signs lost into the next step. Every rank's signs travel as 32-bit
// words (fp32 elements to the communicator, which copies them without looking).
//
// Four collectives a step whatever the model: one all-to-all and three all-gathers, all on the
// data communicator (NCCL on a GPU). The kernels run one tensor per call (OptimizerOps' onebit_*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "backend/optimizer_ops.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "model/param_layout.h"

namespace zt {

/// What a 1-bit optimizer compresses, as flat [lo, hi) ranges of what it hands the all-reduce:
/// OnebitAdam and ZeroOneAdam each tensor apart, in place; OnebitLamb every tensor at once,
/// packed without the flat buffer's gaps into one range.
std::vector<std::pair<size_t, size_t>> onebit_tensors(const OptimizerConfig& optimizer, const ParamLayout& layout);

class OneBitCompression {
 public:
  /// DeepSpeed's padded size of a tensor of n elements over `ranks`.
  static size_t padded_size(size_t n, int ranks);
  /// Device bytes a compression over `tensors` (flat [lo, hi) ranges) at `ranks` allocates, and
  /// its allocations one by one: the two errors (optimizer state), then the signs, scales and sums.
  static std::vector<size_t> device_allocations(const std::vector<std::pair<size_t, size_t>>& tensors, int ranks);
  static size_t device_bytes(const std::vector<std::pair<size_t, size_t>>& tensors, int ranks);

  OneBitCompression(Backend& backend, DataComm& comm, const std::vector<std::pair<size_t, size_t>>& tensors);

  /// The worker's momentum m = b1 m + (1 - b1) g (g: args.grad_scale x `grad`, flat, in
  /// `grad_dtype`), then m all-reduced through the compression: afterwards gathered() holds
  /// every chunk's signs and scales, which apply() turns into m. `exp_avg`: the flat momentum.
  /// On the compute stream.
  void all_reduce(const OptimizerStepArgs& args, float* exp_avg, const void* grad, DType grad_dtype);
  /// Where tensor t's decompressed momentum comes from, for OptimizerOps::onebit_apply.
  SignBlocks gathered(size_t t);
  /// Both errors to zero: where compression starts, and on a resume that cannot restore them.
  void reset_errors();
  /// This rank's errors (the worker's, then the server's): how many floats, and a copy to or
  /// from host memory. A checkpoint keeps them per rank (they are each rank's own, and sized for
  /// its world), so a resume at the same world size continues exactly; DeepSpeed resets them.
  size_t error_count() const { return worker_error_.size() + server_error_.size(); }
  void read_errors(float* out);
  void load_errors(const float* in);

 private:
  /// Where each tensor's errors and signs lie, and the totals: the one definition that both the
  /// allocations and device_allocations (zero_estimate) read.
  struct Layout {
    size_t n, padded, chunk, error_at, server_at, word0;
  };
  struct Plan {
    std::vector<Layout> tensors;
    size_t worker_error = 0, server_error = 0, block_words = 0;  // floats, floats, words a block
  };
  static Plan plan(const std::vector<std::pair<size_t, size_t>>& tensors, int ranks);

  Backend& backend_;
  DataComm& comm_;
  Stream& compute_;
  OptimizerOps& ops_;
  const int ranks_, rank_;
  std::vector<std::pair<size_t, size_t>> tensors_;
  std::vector<Layout> layout_;
  size_t block_words_ = 0;
  DeviceArray<float> worker_error_, server_error_;
  DeviceArray<uint32_t> send_, recv_, server_signs_;  // ranks blocks each
  DeviceArray<float> worker_scales_, server_scales_;   // ranks x tensors
  DeviceArray<double> sums_;                           // the worker's, then the server's, per tensor
};

}  // namespace zt
