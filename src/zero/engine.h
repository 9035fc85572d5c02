// The ZeRO engine: owns the model states in flat buffers partitioned across ranks, serves the
// model's ParamSource hooks, reduces gradients and runs the optimizer step (loss scaling,
// clipping, LR schedule). Per stage, what each rank holds (Ψ parameters, N ranks):
//
//   stage   params (16-bit)   grads (16-bit)   fp32 master + Adam moments
//     0        Ψ                 Ψ                 Ψ        all-reduce at the step
//     1        Ψ                 Ψ                 Ψ/N      reduce-scatter at the step, all-gather params
//     2        Ψ                 Ψ/N               Ψ/N      reduce-scatter per bucket during backward
//     3        Ψ/N               Ψ/N               Ψ/N      + all-gather each unit before use
//
// Mixed precision: the model computes in fp32. acquire_weights() hands out fp32 working copies of
// 16-bit units, gradients of a unit come back in an fp32 slot and are rounded into the 16-bit
// accumulator (stages 0, 1) or into a gradient bucket (stages 2, 3). In fp32 training at stage
// 0/1 the hooks point into the flat buffers and nothing is copied, and the fp32 parameters are
// the master weights (no separate master copy at any stage).
//
// Gradients are held as sums over ranks; the step divides by N (DeepSpeed's post-scaling).
//
// ZeRO-Offload (offload_optimizer, stages 1-3): the last `ratio` of this rank's optimizer range
// keeps its fp32 state in an OptimizerOffload (host memory or NVMe) and is stepped by the CPU;
// the rest stays on the device. Its 16-bit gradient reaches the host as it is reduced: stage 2
// copies each bucket's part on the last micro-step during backward, stage 1 after the reduction
// at the step, and stage 3 reduces straight into a gradient partition held on the host.
// offload_param (stage 3) holds the 16-bit parameter partition in host memory (cpu) or in a swap
// file (nvme, with the optimizer offloaded too: the CPU Adam writes each updated piece there).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/communicator.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "model/gpt2_layout.h"
#include "model/param_source.h"
#include "optim/adam.h"
#include "offload/optimizer_offload.h"
#include "offload/param_store.h"
#include "offload/param_swapper.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"
#include "zero/grad_bucketer.h"
#include "zero/param_gatherer.h"
#include "zero/partition.h"

namespace zt {

/// Model-state bytes per rank, by kind (metrics.jsonl's `model_state_bytes`).
struct ModelStateBytes {
  size_t params = 0, grads = 0, master = 0, exp_avg = 0, exp_avg_sq = 0;
  size_t total() const { return params + grads + master + exp_avg + exp_avg_sq; }
};

/// Temporary buffers by kind (metrics.jsonl's `buffer_bytes`).
struct BufferBytes {
  size_t buckets = 0;  ///< gradient buckets (stage 2/3) and reduction staging (stage 0/1)
  size_t gather = 0;   ///< stage 3 gather buffers allocated so far (gathered, prefetched or kept for reuse)
  size_t working = 0;  ///< fp32 working copies of 16-bit units and unit gradient slots
  size_t offload = 0;  ///< NVMe swap buffers and the staging of updated parameters (host)
};

/// The optimizer's counters, saved in checkpoints next to the tensors.
struct EngineState {
  int64_t adam_step = 0;
  int64_t scheduler_iteration = -1;
  LossScaler::State scaler{};
};

/// The fp32 tensors a checkpoint holds, each over the flat layout.
enum class StateField { kMaster, kExpAvg, kExpAvgSq };

/// Fills out[0, hi - lo) with elements [lo, hi) of a field (hi <= the model's flat size).
using StateReader = std::function<void(StateField field, size_t lo, size_t hi, float* out)>;

/// What an engine starts from. Every way of building one (fresh initialisation, pretrained
/// weights, resuming at the same or another layout) goes through ZeroEngine::load with one of
/// these, so the starting state has a single definition: whatever the source does not carry
/// starts as the config says, never from a default-constructed EngineState (whose loss scale of
/// 0 once made every fine-tuning step NaN).
struct StateSource {
  StateReader read;                     ///< serves kMaster; the moments too when with_moments
  bool with_moments = false;            ///< false: exp_avg and exp_avg_sq start at zero
  std::optional<EngineState> counters;  ///< empty: step 0, the schedule's start, the config's loss scale
};

/// What one optimizer step did.
struct StepOutcome {
  double grad_norm = 0;   ///< global L2 norm of the unscaled, averaged gradient, before clipping
  double lr = 0;
  double loss_scale = 1;  ///< the scale the step's gradients were computed with
  bool skipped = false;   ///< fp16 overflow (seen alike on every rank): no update applied
};

/// GPT-2's initialisation from `seed` (init_gpt2_params), with fresh moments and counters.
StateSource gpt2_init_source(const Gpt2Layout& layout, uint64_t seed);

class ZeroEngine final : public ParamSource<float> {
 public:
  /// Collectives on the model states go through `comm`; the few host doubles a step agrees on
  /// (the gradient norm) through `control`.
  ZeroEngine(const Gpt2Layout& layout, Backend& backend, DataComm& comm, HostComm& control, const DsConfig& config);

  /// load(gpt2_init_source(layout, seed)). At stage 3 the full model never exists on any rank.
  void init_params(uint64_t seed) { load(gpt2_init_source(layout_, seed)); }

  /// The factor backward must multiply d(loss) by: loss_scale / gradient_accumulation_steps.
  double backward_scale() const;
  /// Reduce (stages 0/1), unscale, check overflow, clip, step Adam on this rank's partition,
  /// zero the gradients, share the updated parameters, advance the schedule.
  StepOutcome step();

  /// Model-state bytes held on the device.
  ModelStateBytes model_state_bytes() const;
  /// Model-state bytes offloaded to host memory or NVMe (ZeRO-Offload/Infinity), and which pools.
  ModelStateBytes offloaded_state_bytes() const;
  BufferBytes buffer_bytes() const;
  /// Stage 3: the most parameters held gathered at once so far (0 at other stages).
  size_t peak_live_parameters() const { return gatherer_ ? gatherer_->peak_live_elements() : 0; }
  /// The learning rate and loss scale the next step will use (after a step: DeepSpeed's get_lr()
  /// and cur_scale, which its monitors log).
  double next_lr() const { return scheduler_.current().lr; }
  double loss_scale() const { return scaler_.scale(); }
  int stage() const { return stage_; }
  DType param_dtype() const { return dtype_; }
  const PartitionMap& partition() const { return partition_; }
  /// The full fp32 master weights (flat layout, unpadded), gathered from every rank. Collective.
  std::vector<float> gather_master_weights();

  /// Copies elements [lo, lo + n) of a field into `out`, for a range inside this rank's optimizer
  /// range (stage 0: any range), wherever the state lives. Checkpoints write partitions from here.
  void read_field(StateField field, size_t lo, size_t n, float* out);
  /// Elements [lo, hi) of the parameters in param_dtype(), assembled from every rank's partition
  /// into host memory `out`. Collective (stage 3's partitions); a copy at other stages.
  void gather_params(size_t lo, size_t hi, void* out);
  EngineState state() const;
  /// The counters of an engine that has not stepped yet, as the config sets them.
  EngineState fresh_state() const;
  /// Replaces the model states and counters. Each rank reads only its own partition of the
  /// master weights (and moments) through `source.read` (so a checkpoint on node-local disks
  /// loads as long as each node has its ranks' shards); what a stage holds beyond its partition
  /// is all-gathered, and 16-bit parameters are rounded from the master weights exactly as a
  /// step writes them. Gradients are zeroed and gathered copies dropped. Any world size or stage
  /// may have written what the source serves: the flat layout is the same. Collective.
  void load(const StateSource& source);

  // ParamSource<float>
  const float* acquire_weights(int unit) override;
  void release_weights(int unit) override;
  float* grad_accumulator(int unit) override;
  void grads_done(int unit) override;
  void backward_done() override;

 private:
  struct Slot {
    int unit = -1;
    DeviceArray<float> data;
  };
  float* working_slot(std::vector<Slot>& slots, int unit, bool& fresh);
  size_t elem() const { return dtype_size(dtype_); }
  /// [opt_begin_, opt_begin_ + opt_count_): the flat range this rank's optimizer updates. Its
  /// first device_count_ elements have their state on the device, the rest in offload_.
  unsigned char* param_at(size_t flat) { return params_.data() + (flat - params_base_) * elem(); }
  unsigned char* grad_at(size_t flat) { return grads_.data() + (flat - grads_base_) * elem(); }
  float* master_at(size_t flat);
  /// Elements per collective call for a bucket-size setting: the bucket, capped by the model
  /// and by what the transport moves best in one call.
  size_t collective_chunk(int64_t bucket_elements) const;
  void reduce_full_gradients();
  void share_parameters();
  /// In-place all-gather of a full flat buffer (padded size, `dtype`) from every rank's
  /// partition, in pieces of at most allgather_bucket_size elements.
  void all_gather_flat(void* base, DType dtype);
  size_t offload_begin() const { return opt_begin_ + device_count_; }
  /// Where the CPU Adam reads the offloaded range's gradient.
  const void* offloaded_grads();
  /// Copies the gradient of flat range [lo, hi) (clipped to the offloaded range) to the host.
  void copy_grads_to_host(size_t lo, size_t hi);
  /// Where updated parameters of the offloaded range go: the device's flat buffer, or the
  /// parameter store at stage 3.
  ParamSink param_sink();
  /// This rank's sum of squares of its gradient range, read from the device (one host wait).
  double local_grad_sum_squares();
  /// Zeroes the gradients where they live (device, or host memory at stage 3 with offload).
  void zero_grads();
  /// Fills device range [lo, hi) of a field from `source`, through host memory in pieces.
  void load_to_device(const std::function<void(size_t lo, size_t hi, float* out)>& read, size_t lo, size_t hi,
                      float* device);

  const Gpt2Layout& layout_;
  Backend& backend_;
  Stream& compute_;
  DataComm& comm_;
  HostComm& control_;
  OptimizerOps& opt_ops_;
  DsConfig config_;
  const int stage_, world_, rank_;
  const DType dtype_, comm_dtype_;
  const PartitionMap partition_;
  size_t opt_begin_ = 0, opt_count_ = 0;      // the range the optimizer owns
  size_t device_count_ = 0;                   // ... of which the state stays on the device
  size_t params_base_ = 0, grads_base_ = 0;   // flat offset of params_[0] and grads_[0]

  DeviceArray<unsigned char> params_, grads_;
  DeviceArray<float> master_, exp_avg_, exp_avg_sq_;  // master_ empty in fp32 training
  DeviceArray<unsigned char> staging_;               // stage 0/1 reduction chunks
  std::vector<Slot> weight_slots_, grad_slots_;
  std::unique_ptr<GradBucketer> bucketer_;  // stages 2, 3
  std::unique_ptr<ParamStore> param_store_;  // stage 3: the partition in memory or on NVMe
  ParamSwapper* param_swapper_ = nullptr;    // param_store_ when offload_param is nvme
  std::unique_ptr<ParamGatherer> gatherer_;  // stage 3
  std::unique_ptr<OptimizerOffload> offload_;  // offload_optimizer
  DeviceArray<unsigned char> host_grads_;      // the offloaded range's gradient, copied to the host
  std::unique_ptr<Stream> d2h_stream_;         // ... by copies on this stream, beside backward
  std::unique_ptr<Event> event_;               // orders d2h_stream_ after the compute stream
  DeviceArray<double> norm_sq_, norm_sq_host_; // device / pinned: the step's sum of squares
  bool grads_on_host_ = false;                 // stage 3 offload: grads_ itself is host memory
  bool params_on_host_ = false;                // offload_param: params_ is host memory
  int64_t micro_step_ = 0;                     // backward passes since the last step
  bool offload_prefetched_ = false;            // NVMe optimizer reads started for this step

  Adam adam_;
  LrScheduler scheduler_;
  LossScaler scaler_;
};

}  // namespace zt
