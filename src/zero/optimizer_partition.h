// The optimizer partition: the fp32 master weights and Adam moments of this rank's optimizer
// range (DeepSpeed's single_partition_of_fp32_groups and its optimizer state), and the step that
// updates them.
//
// The first device_count elements of the range keep their state on the device and are stepped
// there; the rest (ZeRO-Offload, offload_optimizer) in an OptimizerOffload, in host memory or on
// NVMe, stepped by the CPU. That part's 16-bit gradient reaches the host as soon as it is final
// (gradient_final, called by the reducer's callback: during the last backward at stages 2, 3,
// right after the step's reduction at stage 1), except at stage 3 with the whole range
// offloaded, where the gradient partition is host memory already. Updated parameters go back to
// the parameter buffer, or to the swap file with offload_param nvme. In fp32 training the
// parameters are the master weights: no separate copy.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "config/ds_config.h"
#include "offload/optimizer_offload.h"
#include "offload/param_store.h"
#include "optim/adam.h"
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
  /// What an OptimizerPartition for this plan allocates.
  static Bytes sizes(const ZeroPlan& plan, const DsConfig& config);

  /// `swapped_params`: the parameter store with offload_param nvme (updated parameters are
  /// written there), else nullptr (they go to `buffers`).
  OptimizerPartition(const ZeroPlan& plan, const DsConfig& config, Backend& backend, MixedPrecisionBuffers& buffers,
                     ParamStore* swapped_params);

  /// The master weight of flat element `flat` of the device part.
  float* master_at(size_t flat);
  /// The last backward of a step begins: NVMe reads of the first pieces may start.
  void prefetch();
  /// The gradient of flat range [lo, hi) is final: its offloaded part starts for the host.
  void gradient_final(size_t lo, size_t hi);
  /// Adam over the range (device part on the compute stream, offloaded part on the CPU). The
  /// compute stream is ordered after every updated parameter is written.
  void step(const AdamStepArgs& args);
  /// Copies elements [lo, lo + n) of a field (inside the range) into host memory `out`.
  void read_field(StateField field, size_t lo, size_t n, float* out);
  /// Replaces this rank's partition of every field from `read`, and the parameters rounded from
  /// the master weights exactly as a step writes them. Moments outside it are zeroed unless
  /// `moments` (they are loaded, and all-gathered by the caller where the stage needs them).
  void load(const FieldReader& read, bool moments);
  void* exp_avg() { return exp_avg_.data(); }
  void* exp_avg_sq() { return exp_avg_sq_.data(); }
  void* master() { return master_.data(); }

  Bytes bytes() const;

 private:
  /// Where the CPU Adam reads the offloaded range's gradient (host memory).
  const void* offloaded_grads();
  /// Where updated parameters of the offloaded range go.
  ParamSink param_sink();
  /// Fills device range [lo, hi) of a field from `read`, through host memory in pieces.
  void load_to_device(StateField field, const FieldReader& read, size_t lo, size_t hi, float* device);

  const ZeroPlan& plan_;
  Backend& backend_;
  Stream& compute_;
  OptimizerOps& ops_;
  MixedPrecisionBuffers& buffers_;
  ParamStore* swapped_params_;
  DeviceArray<float> master_, exp_avg_, exp_avg_sq_;  // the device part; master_ empty in fp32
  std::unique_ptr<OptimizerOffload> offload_;
  DeviceArray<unsigned char> host_grads_;  // the offloaded range's gradient, copied to the host
  std::unique_ptr<Stream> d2h_stream_;     // ... by copies on this stream, beside backward
  std::unique_ptr<Event> event_;           // orders d2h_stream_ after the compute stream
};

}  // namespace zt
