// The ZeRO engine: serves the model's ParamSource hooks and runs the optimizer step (loss
// scaling, clipping, LR schedule) over the model states, which its components hold:
//
//   ZeroPlan                         what this rank holds at its stage, and where (zero_plan.h:
//                                    the per-stage table)
//   MixedPrecisionBuffers            16-bit parameters and gradients, working copies in the
//                                    activation dtype
//   GradientReducer                  one bucket path for every stage; the stage picks the policy
//   PartitionedParameterCoordinator  stage 3: gather, prefetch, release, persistence, the store
//   OptimizerPartition               fp32 master and moments of this rank's range, device and
//                                    offloaded (ZeRO-Offload/Infinity), and the optimizer step
//
// Each component states the size of what it allocates for a plan; zero_estimate adds those up.
// Gradients are held as sums over ranks; the step divides by N (DeepSpeed's post-scaling).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "core/error.h"
#include "comm/communicator.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "model/param_layout.h"
#include "model/param_source.h"
#include "optim/optimizer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/onebit_lamb.h"
#include "zero/gradient_reducer.h"
#include "zero/mixed_precision_buffers.h"
#include "zero/muon_matrices.h"
#include "zero/onebit_compression.h"
#include "zero/model_states.h"
#include "zero/optimizer_partition.h"
#include "zero/parameter_coordinator.h"
#include "zero/partition.h"
#include "zero/zero_plan.h"

namespace zt {

/// What one optimizer step did.
struct StepOutcome {
  double grad_norm = 0;   ///< global L2 norm of the unscaled, averaged gradient, before clipping
  double lr = 0;
  double loss_scale = 1;  ///< the scale the step's gradients were computed with
  bool skipped = false;   ///< fp16 overflow (seen alike on every rank): no update applied
};

/// The model's own initialisation from `seed` (ParamLayout::init), with fresh moments and counters.
StateSource init_source(const ParamLayout& layout, uint64_t seed);

class ZeroEngine final : public ParamSource<float> {
 public:
  /// Collectives on the model states go through `comm`; the few host doubles a step agrees on
  /// (the gradient norm) through `control`. The model computes with `activation_dtype` (fp32 or
  /// bf16, kernel_ops.h): its weights are handed out in that dtype (params<T>()).
  /// MiCS (zero/mics_groups.h): `comm` and `control` are this rank's shard group's, and `replicas`
  /// the same index in every group, across which the gradients are all-reduced at the step.
  ZeroEngine(const ParamLayout& layout, Backend& backend, DataComm& comm, HostComm& control, const DsConfig& config,
             DType activation_dtype = DType::kF32, DataComm* replicas = nullptr);
  // The components hold references to plan_: an engine stays where it was built.
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  /// load(init_source(layout, seed)). At stage 3 the full model never exists on any rank.
  void init_params(uint64_t seed) { load(init_source(layout_, seed)); }

  /// The factor backward must multiply d(loss) by: loss_scale / gradient_accumulation_steps.
  double backward_scale() const;
  /// Reduce (stages 0/1), unscale, check overflow, clip, step the optimizer on this rank's partition,
  /// zero the gradients, share the updated parameters, advance the schedule.
  StepOutcome step();
  /// --delayed_param_update: puts the update still pending into the parameters, so that what
  /// reads them next (an evaluation, a checkpoint, the end of the run) sees the last step's
  /// model. Collective at stages 1 and 2 (the parameters are all-gathered); a no-op when nothing
  /// is pending, alike on every rank.
  void apply_delayed_update();

  /// Model-state bytes held on the device.
  ModelStateBytes model_state_bytes() const;
  /// Model-state bytes offloaded to host memory or NVMe (ZeRO-Offload/Infinity).
  ModelStateBytes offloaded_state_bytes() const;
  BufferBytes buffer_bytes() const;
  /// Bytes of this rank's gradients and gradient buckets in the data communicator's shared memory
  /// (DataComm::allocate_shared), which its collectives read in place; 0 where it has none.
  size_t shared_gradient_bytes() const;
  /// Stage 3: the most parameters held gathered at once so far (0 at other stages).
  size_t peak_live_parameters() const { return coordinator_ ? coordinator_->peak_live_elements() : 0; }
  /// The learning rate and loss scale the next step will use (after a step: DeepSpeed's get_lr()
  /// and cur_scale, which its monitors log).
  double next_lr() const { return scheduler_.current().lr; }
  double loss_scale() const { return scaler_.scale(); }
  int stage() const { return plan_.stage; }
  DType param_dtype() const { return plan_.dtype; }
  /// The dtype the model computes with (the constructor's activation_dtype).
  DType activation_dtype() const { return plan_.working_dtype; }
  /// The dtype the model's GEMM inputs are rounded to (KernelOps::set_matmul_dtype): bf16 in a
  /// bf16 run on a CPU with bf16 instructions, else fp32.
  DType matmul_dtype() const { return matmul_dtype_; }
  /// The CPU's bf16 kernels keep the parameters packed for their GEMMs (ZT_BF16_WEIGHT_PACKS=1).
  bool weight_packs() const { return weight_packs_; }
  const PartitionMap& partition() const { return plan_.partition; }
  /// The full fp32 master weights (flat layout, unpadded), gathered from every rank. Collective.
  std::vector<float> gather_master_weights();

  // The state checkpoints read and write.
  /// Copies elements [lo, lo + n) of a field into `out`, for a range inside this rank's optimizer
  /// range (stage 0: any range), wherever the state lives. Checkpoints write partitions from here.
  void read_field(StateField field, size_t lo, size_t n, float* out) { optimizer_.read_field(field, lo, n, out); }
  /// The fields a checkpoint holds: the master weights and the moments the optimizer keeps.
  std::vector<StateField> state_fields() const { return zt::state_fields(config_.optimizer); }
  /// Adafactor: its matrices' row and column factors (AdafactorFactors::extent() counts), which a
  /// checkpoint holds beside the flat fields; {0, 0} for any other optimizer.
  std::pair<size_t, size_t> factor_extent() const;
  void read_factors(float* rows, float* cols) { factors_->read(rows, cols); }
  /// OnebitAdam and ZeroOneAdam past one rank: this rank's compression errors (OneBitCompression::read_errors),
  /// which a checkpoint holds per rank; 0 floats for any other optimizer.
  size_t onebit_error_count() const { return onebit_ ? onebit_->error_count() : 0; }
  void read_onebit_errors(float* out) { onebit_->read_errors(out); }
  /// ZeroOneAdam between two meetings of the ranks: the floats of this rank's own state (its
  /// master weights, exp_avg and momentum accumulator over its optimizer range), which a
  /// checkpoint holds per rank; 0 where the ranks have just met, and for any other optimizer.
  size_t zero_one_local_count() const;
  /// Copies that state into `out` and returns the lrs summed since the ranks met.
  double read_zero_one_local(float* out);
  /// OneBitLamb: its per-tensor scalars (OneBitLambTensor: every tensor's coeff_freeze, then
  /// every last_factor, then every scaling), the same on every rank and at any world size,
  /// which every shard holds; empty for any other optimizer.
  std::vector<double> onebit_lamb_scalars() const;
  /// The optimizer's DeepSpeed name ("AdamW", "Lion", ...).
  const char* optimizer_type() const { return optimizer_name(config_.optimizer.type); }
  /// Elements [lo, hi) of the parameters in param_dtype(), assembled from every rank's partition
  /// into host memory `out`. Collective: stage 3 gathers the partitions, and a pending delayed
  /// update is applied first (all-gathered at stages 1, 2); otherwise a copy. Call it on every rank.
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

  /// The hooks for a model whose activations are T, which must be activation_dtype(): the engine
  /// itself for fp32, an adapter over the same state for bf16.
  template <typename T>
  ParamSource<T>& params();

  // ParamSource<float>, for an fp32 model
  const float* acquire_weights(int unit) override;
  void release_weights(int unit) override;
  float* grad_accumulator(int unit) override;
  void grads_done(int unit) override;
  void backward_done() override;

 private:
  /// This rank's sum of squares of its gradient range, read from the device (one host wait).
  double local_grad_sum_squares();
  /// Lamb's two passes over this rank's range, with the per-tensor norms all-reduced between
  /// them (stage 0: rank 0's); returns the trust ratios it stepped with.
  std::vector<float> lamb_step(const OptimizerStepArgs& args);
  /// Stage 0 past one rank: replaces per-tensor sums every rank computed alike with rank 0's
  /// (one small host all-reduce), so that the replicas' scalars agree bit for bit.
  void agree_on_replicated(std::vector<double>& sums);
  /// Muon's: the momentum (and AdamW for the other tensors), each matrix orthogonalised by its
  /// owner, the matrices' update.
  void muon_step(const OptimizerStepArgs& args);
  /// Adafactor's three passes: the matrices' g^2 sums (all-reduced), the factors, the per-tensor
  /// norms (all-reduced), the update. `lr`: the schedule's.
  void adafactor_step(const OptimizerStepArgs& args, double lr);
  /// OnebitAdam's step: nothing at step 1 (DeepSpeed's set-up step), Adam without bias correction
  /// until freeze_step, then the momentum from the local gradient, all-reduced compressed, and
  /// the step with exp_avg_sq frozen (`compressed`).
  void onebit_step(const OptimizerStepArgs& args, bool compressed);
  /// ZeroOneAdam's step (zero_one_phase): nothing at step 1, Adam on the variance steps, the
  /// momentum from the compressed all-reduced gradient between them; past var_freeze_step each
  /// rank's own step, and where the ranks meet, the compressed all-reduce of their motions.
  /// `lr`: the schedule's (DeepSpeed sums it as lrs).
  void zero_one_step(const OptimizerStepArgs& args, double lr);
  /// OnebitLamb's step: nothing at step 1, Lamb without bias correction through the warm-up
  /// (its trust ratios averaged, exp_avg_sq copied to exp_avg_sq_fresh at freeze_step), then
  /// every tensor's momentum from its local gradient, scaled, all-reduced compressed in one
  /// piece, and each tensor's step by the frozen ratio times its factor (`compressed`).
  void onebit_lamb_step(const OptimizerStepArgs& args, bool compressed);
  /// ZeroOneAdam's accumulator and lrs from `source` (LocalStateReader), or afresh.
  void load_zero_one_local(const StateSource& source);
  /// After the optimizer wrote this rank's range: every rank's updated parameters where the
  /// stage keeps them whole (stages 1, 2), and no stale copy anywhere.
  void share_parameters();
  /// Elements per all-gather of a flat buffer (allgather_bucket_size, capped).
  size_t allgather_chunk() const;
  /// The unit's weights in the working dtype (ParamSource::acquire_weights, untyped).
  const void* acquire_working(int unit);
  /// ParamSource<bf16> over this engine: a bf16 model reads bf16 weights, writes fp32 gradients.
  class Bf16Params final : public ParamSource<bf16> {
   public:
    explicit Bf16Params(ZeroEngine& e) : e_(e) {}
    const bf16* acquire_weights(int unit) override { return static_cast<const bf16*>(e_.acquire_working(unit)); }
    void release_weights(int unit) override { e_.release_weights(unit); }
    float* grad_accumulator(int unit) override { return e_.grad_accumulator(unit); }
    void grads_done(int unit) override { e_.grads_done(unit); }
    void backward_done() override { e_.backward_done(); }

   private:
    ZeroEngine& e_;
  };
  /// True during the last backward of a step and at the step: reduced gradients are final.
  bool gradients_final() const { return micro_step_ + 1 >= config_.gradient_accumulation_steps; }

  const ParamLayout& layout_;
  Backend& backend_;
  Stream& compute_;
  DataComm& comm_;
  HostComm& control_;
  DataComm* replicas_;  // MiCS: the other shard groups' ranks with this index (null: none)
  const DsConfig config_;
  const ZeroPlan plan_;
  DType matmul_dtype_ = DType::kF32;
  bool weight_packs_ = false;

  MixedPrecisionBuffers buffers_;
  std::unique_ptr<PartitionedParameterCoordinator> coordinator_;  // stage 3
  OptimizerPartition optimizer_;
  std::unique_ptr<MuonMatrices> muon_;  // Muon only
  std::unique_ptr<AdafactorFactors> factors_;  // Adafactor only
  std::unique_ptr<OneBitCompression> onebit_;  // the 1-bit optimizers on more than one rank only
  DeviceArray<float> accumulator_;             // ZeroOneAdam's momentum accumulator (its comm_buffer)
  double lrs_ = 0;                             // ZeroOneAdam: the lrs summed since the ranks last met
  bool apart_ = false;                         // ZeroOneAdam: local steps taken since the ranks last met
  std::vector<OneBitLambTensor> lamb_tensors_;  // OneBitLamb's per-tensor scalars
  DeviceArray<float> packed_;                   // OneBitLamb: every tensor's momentum, without gaps
  GradientReducer reducer_;
  DeviceArray<double> norm_sq_, norm_sq_host_;  // device / pinned: the step's sum of squares
  int64_t micro_step_ = 0;                      // backward passes since the last step
  bool offload_prefetched_ = false;             // NVMe optimizer reads started for this step

  Optimizer optimizer_rule_;  // the update rule's hyperparameters and step count
  LrScheduler scheduler_;
  LossScaler scaler_;
  Bf16Params bf16_params_{*this};
};

template <>
inline ParamSource<float>& ZeroEngine::params<float>() {
  ZT_CHECK(activation_dtype() == DType::kF32, "an fp32 model on an engine that hands out ",
           dtype_name(activation_dtype()), " weights");
  return *this;
}
template <>
inline ParamSource<bf16>& ZeroEngine::params<bf16>() {
  ZT_CHECK(activation_dtype() == DType::kBF16, "a bf16 model on an engine that hands out ",
           dtype_name(activation_dtype()), " weights");
  return bf16_params_;
}

}  // namespace zt
