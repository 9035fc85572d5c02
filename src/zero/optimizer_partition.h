// The optimizer partition: the fp32 master weights and the optimizer's moments (Adam's exp_avg
// and exp_avg_sq, Lion's exp_avg, Adagrad's exp_avg_sq) of this rank's optimizer range
// (DeepSpeed's single_partition_of_fp32_groups and its optimizer state), and the step that
// updates them. The element-wise rules need no shape: any flat range steps on its own.
//
// The first device_count elements of the range keep their state on the device and are stepped
// there; the rest (ZeRO-Offload, offload_optimizer) in an OptimizerOffload, in host memory or on
// NVMe, stepped by the CPU. That part's 16-bit gradient reaches the host as soon as it is final
// (gradient_final, called by the reducer's callback: during the last backward at stages 2, 3,
// right after the step's reduction at stage 1), except at stage 3 with the whole range
// offloaded, where the gradient partition is host memory already. Updated parameters go back to
// the parameter buffer, or to the swap file with offload_param nvme. In fp32 training the
// parameters are the master weights: no separate copy.
//
// The delayed parameter update (ZeRO-Offload's DPU, --delayed_param_update): step(args, true)
// starts the offloaded part's CPU Adam on a thread of its own and returns, so that it runs
// beside the next step's micro-steps, which read the parameters of the step before. The new
// parameters wait in host memory (`pending`). In the next step's last backward, once the update
// has ended, each unit's part goes up as soon as the unit is done with its weights (params_free;
// pinned memory only, so that no copy waits); the next step sends what is left and starts the
// next update. Whoever reads what the thread owns joins it first: the gradient's host copy (the
// next step's first gradient_final), the NVMe swap buffers (prefetch), the state.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"
#include "offload/optimizer_offload.h"
#include "offload/param_store.h"
#include "model/param_layout.h"
#include "optim/adafactor.h"
#include "optim/optimizer.h"
#include "zero/adafactor_factors.h"
#include "zero/onebit_compression.h"
#include "zero/mixed_precision_buffers.h"
#include "zero/model_states.h"
#include "zero/zero_plan.h"

namespace zt {

/// Fills out[0, hi - lo) with elements [lo, hi) of a field: the model's values, zeros in the
/// padding and for moments a source does not carry.
using FieldReader = std::function<void(StateField field, size_t lo, size_t hi, float* out)>;

class OptimizerPartition {
 public:
  struct Bytes {
    ModelStateBytes device;     ///< master (16-bit training) and moments of the device part
    ModelStateBytes offloaded;  ///< the offloaded part's state (host memory or its file), and its gradient's host copy
    Pool host_pool = Pool::kHost;  ///< where the offloaded state, the gradient copy and the buffers live
    size_t host = 0;            ///< bytes in host_pool: state on cpu, the gradient copy
    size_t nvme = 0;            ///< the swap file
    size_t buffers = 0;         ///< swap and staging buffers (host_pool)
  };
  /// What an OptimizerPartition for this plan allocates (Muon's exp_avg_sq: for the tensors that
  /// are not hidden matrices, `shapes`, alone).
  static Bytes sizes(const ZeroPlan& plan, const DsConfig& config,
                     const std::vector<std::pair<size_t, size_t>>& tensors = {},
                     const std::vector<TensorShape>& shapes = {});

  /// `swapped_params`: the parameter store with offload_param nvme (updated parameters are
  /// written there), else nullptr (they go to `buffers`).
  /// `tensors`: the model's tensors as flat [lo, hi) ranges in order (Lamb's trust ratios are per
  /// tensor; the element-wise rules ignore them), and their shapes (Muon's matrices).
  OptimizerPartition(const ZeroPlan& plan, const DsConfig& config, Backend& backend, MixedPrecisionBuffers& buffers,
                     ParamStore* swapped_params, std::vector<std::pair<size_t, size_t>> tensors = {},
                     std::vector<TensorShape> shapes = {});
  ~OptimizerPartition();

  /// The master weight of flat element `flat` of the device part.
  float* master_at(size_t flat);
  /// The last backward of a step begins: NVMe reads of the first pieces may start.
  void prefetch();
  /// The gradient of flat range [lo, hi) is final: its offloaded part starts for the host.
  void gradient_final(size_t lo, size_t hi);
  /// The optimizer's step (args.rule) over the range (device part on the compute stream, offloaded part on the CPU). The
  /// compute stream is ordered after every updated parameter is written, the previous delayed
  /// update's included; with `delay` the offloaded part's new parameters are that next update.
  void step(const OptimizerStepArgs& args, bool delay = false);
  /// Lamb's first pass over the range (device and offloaded parts): updates the moments and
  /// returns this rank's sum(w^2) and sum(u^2) for every tensor (2 per tensor, in order; zeros for
  /// the tensors outside the range). The caller sums them over the ranks holding parts.
  std::vector<double> lamb_norms(const OptimizerStepArgs& args);
  /// Lamb's second pass, with each tensor's trust ratio; then as step(): the parameters written,
  /// the compute stream ordered after them.
  void lamb_apply(const OptimizerStepArgs& args, const std::vector<float>& trust_ratios);
  /// Muon's first pass: the matrices' momentum, their updates written to `updates` (device
  /// memory, element i for flat opt_begin + i; the offloaded part's computed on the CPU and
  /// copied there); on the device part AdamW steps every other tensor whole.
  void muon_momentum(const OptimizerStepArgs& args, float* updates);
  /// Muon's second pass: the matrices' weights from their orthogonalised `updates`, and on the
  /// offloaded part AdamW's tensors, as the parameters go out (as Lamb's second pass).
  void muon_apply(const OptimizerStepArgs& args, const float* updates);
  /// Adafactor's first pass: adds g^2 of this rank's pieces of every matrix inside flat [lo, hi)
  /// to factors.sums() (overwritten first: by the offloaded part's sums where there is one).
  void adafactor_sums(const OptimizerStepArgs& args, AdafactorFactors& factors, size_t lo, size_t hi);
  /// Adafactor's second pass, with the factors updated: the 1-D tensors' exp_avg_sq, and this
  /// rank's sum(w^2) (with `weight_norms`) and sum(u^2) for every tensor, as lamb_norms.
  std::vector<double> adafactor_norms(const OptimizerStepArgs& args, AdafactorFactors& factors, bool weight_norms);
  /// Adafactor's third pass, with each tensor's scalars; then as step().
  void adafactor_apply(const OptimizerStepArgs& args, const std::vector<AdafactorTensorStep>& steps,
                       AdafactorFactors& factors);
  /// OnebitAdam past its warm-up (stage 0, nothing offloaded): every tensor's momentum from the
  /// compressed all-reduce (`compression`; null on one rank, where exp_avg is already the
  /// momentum), and the step with exp_avg_sq frozen.
  void onebit_apply(const OptimizerStepArgs& args, OneBitCompression* compression);
  /// OneBitLamb past its warm-up (stage 0, nothing offloaded), before the compressed all-reduce:
  /// every tensor's momentum with this step's gradient, times its scaling coefficient, into
  /// `packed` (device memory, the tensors one after another without gaps); exp_avg unchanged.
  void onebit_lamb_momentum(const OptimizerStepArgs& args, const std::vector<float>& scales, float* packed);
  /// After it, `reduced` (packed as above) holding the all-reduce's result: exp_avg from it,
  /// exp_avg_sq_fresh from the reconstructed gradient, and per tensor sum(update^2),
  /// sum(update_prelim^2) and max(denom / denom_real) (3 per tensor, in order). Then
  /// lamb_apply() with each tensor's coefficient takes the step.
  std::vector<double> onebit_lamb_stats(const OptimizerStepArgs& args, const std::vector<float>& scales,
                                        const float* reduced);
  /// OneBitLamb where compression starts: each tensor's sum(exp_avg^2), in order.
  std::vector<double> exp_avg_sum_squares();
  /// One of ZeroOneAdam's passes over every tensor (stage 0, nothing offloaded): `accumulator`
  /// is its momentum accumulator (device memory over the range), `compression` holds the
  /// all-reduce's result where the pass reads one (null on one rank, or for the local passes).
  void zero_one_pass(const ZeroOneArgs& z, const OptimizerStepArgs& args, float* accumulator,
                     OneBitCompression* compression);
  /// Replaces the master weights and exp_avg of the whole range from host memory (a rank's own
  /// state, ZeroOneAdam's between meetings) and the parameters rounded from them.
  void load_range(const float* master, const float* exp_avg);
  /// Muon at stage 0: each rank's partition of the packed exp_avg_sq, in elements, in rank order
  /// (the counts that all-gather it).
  std::vector<size_t> aux_partition_counts() const;
  /// The model has read the weights of flat range [lo, hi) for the last time this step: a pending
  /// delayed update may overwrite them (on its upload stream, after the compute stream's work).
  void params_free(size_t lo, size_t hi);
  /// A delayed update is computed or in flight, and not yet in the parameters.
  bool update_pending() const { return pending_; }
  /// Puts a pending delayed update into the parameters; the compute stream is ordered after it.
  void apply_delayed();
  /// Copies elements [lo, lo + n) of a field (inside the range) into host memory `out`.
  void read_field(StateField field, size_t lo, size_t n, float* out);
  /// Replaces this rank's partition of every field from `read`, and the parameters rounded from
  /// the master weights exactly as a step writes them. Moments outside it are zeroed unless
  /// `moments` (they are loaded, and all-gathered by the caller where the stage needs them).
  void load(const FieldReader& read, bool moments);
  /// Whether the optimizer keeps this field (the master weights always).
  bool has(StateField field) const {
    switch (field) {
      case StateField::kMaster: return true;
      case StateField::kExpAvg: return has_exp_avg_;
      case StateField::kExpAvgSq: return has_exp_avg_sq_;
      case StateField::kExpAvgSqFresh: return opt_.has_exp_avg_sq_fresh();
    }
    return false;
  }
  void* exp_avg() { return exp_avg_.data(); }
  float* exp_avg_sq_fresh() { return exp_avg_sq_fresh_.data(); }
  void* exp_avg_sq() { return exp_avg_sq_.data(); }
  void* master() { return master_.data(); }

  Bytes bytes() const;

 private:
  /// Zeroes the device part's moments.
  void zero_moments();
  /// Where the CPU step reads the offloaded range's gradient (host memory).
  const void* offloaded_grads();
  /// Where updated parameters of the offloaded range go.
  ParamSink param_sink();
  /// Waits for the delayed update's CPU Adam, and throws what it threw.
  void join_update();
  /// Enqueues the upload of pending parameters [lo, hi) (flat, inside the offloaded range).
  void upload_pending(size_t lo, size_t hi);
  /// Calls fn(t, a, b) for each tensor t overlapping flat [lo, hi), with [a, b) the overlap.
  template <typename Fn>
  void for_tensors(size_t lo, size_t hi, Fn fn) const;
  /// The offloaded part's second pass of a rule that steps by tensor (Lamb, Muon): for each swap
  /// piece, step(t, piece, at, a, n, out) steps tensor t's n elements from flat a (element `at` of
  /// the piece) and writes their parameters to `out` (the staging, in the parameter dtype);
  /// alignment gaps get the parameters rounded from the master. The compute stream then waits for
  /// the parameters.
  template <typename Fn>
  void send_params_by_tensor(Fn step);
  /// Muon and Adafactor: where flat element `flat` of a tensor that keeps exp_avg_sq sits in the
  /// packed exp_avg_sq (the device part's; Adafactor's offloaded part's in host memory).
  float* aux_exp_avg_sq(size_t t, size_t flat);
  /// Whether tensor t keeps exp_avg_sq element by element (keeps_exp_avg_sq).
  bool keeps_sq(size_t t) const;
  /// Adafactor's second moment of tensor t from flat element `flat` on, where that element is
  /// stepped (the device part's, or the offloaded part's in host memory).
  AdafactorMoment adafactor_moment(AdafactorFactors& factors, size_t t, size_t flat);
  /// Fills device range [lo, hi) of a field from `read`, through host memory in pieces.
  void load_to_device(StateField field, const FieldReader& read, size_t lo, size_t hi, float* device);

  const ZeroPlan& plan_;
  Backend& backend_;
  Stream& compute_;
  OptimizerOps& ops_;
  MixedPrecisionBuffers& buffers_;
  ParamStore* swapped_params_;
  const bool has_exp_avg_, has_exp_avg_sq_;           // the moments the optimizer keeps
  const OptimizerConfig opt_;
  DeviceArray<float> master_, exp_avg_, exp_avg_sq_;  // the device part; master_ empty in fp32, absent moments empty
  DeviceArray<float> exp_avg_sq_fresh_;  // OneBitLamb's (stage 0: the whole range)
  std::unique_ptr<OptimizerOffload> offload_;
  const std::vector<std::pair<size_t, size_t>> tensors_;  // the model's tensors, flat [lo, hi), in order
  const std::vector<TensorShape> shapes_;
  // Muon: exp_avg_sq holds only the AdamW-stepped tensors' elements of the range, packed in flat
  // order; per tensor, where its first element in the range is (SIZE_MAX: a matrix, or outside).
  std::vector<size_t> aux_start_;
  DeviceArray<float> host_updates_;  // Muon with offload: the offloaded range's updates (host pool)
  // Adafactor with offload: the offloaded range's 1-D tensors' exp_avg_sq, packed (host pool).
  DeviceArray<float> host_aux_sq_;
  std::vector<size_t> host_aux_start_;
  DeviceArray<double> tensor_sums_;  // Lamb, Adafactor and OneBitLamb: the device part's per-tensor sums
  DeviceArray<unsigned char> host_grads_;  // the offloaded range's gradient, copied to the host
  std::unique_ptr<Stream> d2h_stream_;     // ... by copies on this stream, beside backward
  std::unique_ptr<Event> event_;           // orders d2h_stream_ after the compute stream
  // The delayed parameter update.
  DeviceArray<unsigned char> pending_params_;  // the offloaded range's new parameters (host pool)
  std::thread update_;                         // its CPU Adam
  std::exception_ptr update_error_;            // what that threw
  std::atomic<bool> update_done_{true};        // it has ended (set by the thread, last)
  bool pending_ = false;                       // pending_params_ not yet (all) in the parameters
  std::vector<std::pair<size_t, size_t>> sent_;  // flat ranges of it already enqueued for upload
  std::unique_ptr<Stream> h2d_stream_;         // their copies
  std::unique_ptr<Event> h2d_ready_, h2d_done_;  // after the compute stream; after the copies
};

}  // namespace zt
