#include "zero/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "zero/partition_collectives.h"

namespace zt {

ZeroEngine::ZeroEngine(const ParamLayout& layout, Backend& backend, DataComm& comm, HostComm& control,
                       const DsConfig& config, DType activation_dtype, DataComm* replicas)
    : layout_(layout), backend_(backend), compute_(backend.compute_stream()), comm_(comm), control_(control),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      config_(config),
      plan_(config, layout.flat_size(), comm.size(), comm.rank(), backend.kernels_reach_host_memory(),
            activation_dtype),
      buffers_(plan_, layout, backend, comm),
      coordinator_(!plan_.params_replicated() ? std::make_unique<PartitionedParameterCoordinator>(plan_, layout, backend, comm,
                                                                                        buffers_.params(), config)
                                    : nullptr),
      optimizer_(plan_, config, backend, buffers_, plan_.params_on_nvme ? &coordinator_->store() : nullptr,
                 layout.tensor_ranges(), layout.tensor_shapes()),
      muon_(config.optimizer.type == OptimizerConfig::Type::kMuon
                ? std::make_unique<MuonMatrices>(
                      plan_, config.optimizer, backend, comm, layout.tensor_ranges(), layout.tensor_shapes(),
                      std::min(size_t(config.zero.allgather_bucket_size), comm.max_collective_elements()))
                : nullptr),
      factors_(config.optimizer.factored()
                   ? std::make_unique<AdafactorFactors>(backend, layout.tensor_shapes(), plan_.offloaded > 0)
                   : nullptr),
      onebit_(config.optimizer.onebit() && comm.size() > 1
                  ? std::make_unique<OneBitCompression>(backend, comm, onebit_tensors(config.optimizer, layout))
                  : nullptr),
      reducer_(plan_, config.zero, backend, comm, buffers_), norm_sq_(backend, 1), norm_sq_host_(backend, 1, Pool::kPinned),
      optimizer_rule_(config.optimizer), scheduler_(config.scheduler, config.optimizer.lr), scaler_(config.fp16) {
  if (config.optimizer.type == OptimizerConfig::Type::kZeroOneAdam) {
    accumulator_ = DeviceArray<float>(backend, plan_.device_count);
    backend.zero_async(accumulator_.data(), accumulator_.bytes(), compute_);
  }
  if (config.optimizer.type == OptimizerConfig::Type::kOneBitLamb) {
    lamb_tensors_.resize(layout.tensor_ranges().size());
    packed_ = DeviceArray<float>(backend, onebit_tensors(config.optimizer, layout)[0].second);
  }
  // A reduced range is final on the last micro-step: ZeRO-Offload sends it to the host at once
  // (during backward at stages 2, 3). Under MiCS it is final once the replicas have summed it,
  // at the step.
  reducer_.on_reduced([this](size_t lo, size_t hi) {
    if (gradients_final() && !replicas_) optimizer_.gradient_final(lo, hi);
  });
  // DeepSpeed's bf16 mode is a bf16 model: its matmuls take bf16 inputs. With bf16 activations
  // they are bf16 values already. With fp32 activations the backend's kernels round them where
  // that is faster (bf16 instructions) and stay fp32 elsewhere; fp32 and fp16 runs keep fp32
  // GEMMs (fp16 training computes in fp32 here, as before).
  matmul_dtype_ = plan_.working_dtype == DType::kBF16
                      ? backend.ops_bf16().set_matmul_dtype(DType::kBF16)
                      : backend.ops().set_matmul_dtype(plan_.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32);
  // The step (share_parameters) and a load each end in invalidate_weights: where the plan allows,
  // the CPU's oneDNN GEMMs may keep the weights in their own layout across micro-steps.
  weight_packs_ = buffers_.keep_weight_packs();
}

StateSource init_source(const ParamLayout& layout, uint64_t seed) {
  return {[&layout, seed](StateField, size_t lo, size_t hi, float* out) { layout.init(seed, out, lo, hi); },
          false, std::nullopt, nullptr, nullptr, nullptr, nullptr};
}

double ZeroEngine::backward_scale() const {
  return scaler_.scale() / double(config_.gradient_accumulation_steps);
}

const void* ZeroEngine::acquire_working(int unit) {
  if (coordinator_) return coordinator_->acquire(unit);
  return buffers_.working_weights(unit);
}

const float* ZeroEngine::acquire_weights(int unit) {
  ZT_CHECK(plan_.working_dtype == DType::kF32, "fp32 weights asked of an engine whose model computes in ",
           dtype_name(plan_.working_dtype));
  return static_cast<const float*>(acquire_working(unit));
}

void ZeroEngine::release_weights(int unit) {
  // Stages 0-2 keep every parameter resident; the working copy stays valid until reused.
  if (coordinator_) coordinator_->release(unit);
}

float* ZeroEngine::grad_accumulator(int unit) {
  // The last backward of the step begins (at the lm_head, in the last micro-step's forward when
  // the model runs the classifier's backward there): the optimizer's first NVMe pieces can start
  // reading.
  if (!offload_prefetched_ && gradients_final()) {
    optimizer_.prefetch();
    offload_prefetched_ = true;
  }
  return buffers_.grad_slot(unit);
}

void ZeroEngine::grads_done(int unit) {
  const size_t offset = layout_.unit_offset(unit), n = layout_.unit_size(unit);
  if (float* slot = buffers_.finished_grad_slot(unit)) {  // none in fp32 at stages 0, 1: accumulated in place
    if (reducer_.reduces_during_backward()) {
      reducer_.add(offset, slot, n);
    } else {
      backend_.optimizer_ops().accumulate_into(buffers_.grad_at(offset), plan_.grad_dtype, slot, DType::kF32, n);
    }
  }
  // The unit's weights are not read again this step: a delayed update may replace them now,
  // while backward goes on.
  if (gradients_final()) optimizer_.params_free(offset, offset + n);
}

void ZeroEngine::apply_delayed_update() {
  if (!optimizer_.update_pending()) return;  // alike on every rank: the same steps were delayed
  optimizer_.apply_delayed();
  share_parameters();
}

void ZeroEngine::backward_done() {
  reducer_.backward_done();
  ++micro_step_;
}

size_t ZeroEngine::allgather_chunk() const {
  return collective_chunk(plan_.partition, comm_.max_collective_elements(), config_.zero.allgather_bucket_size);
}

void ZeroEngine::share_parameters() {
  // Each rank updated its own range of a buffer every rank holds whole (stages 1, 2).
  if (plan_.params_replicated() && !plan_.optimizer_replicated() && plan_.world > 1) {
    if (config_.zero.allgather_partitions) {
      all_gather_partitions(comm_, compute_, plan_.partition, buffers_.params(), plan_.dtype,
                            allgather_chunk());
    } else {
      broadcast_partitions(comm_, compute_, plan_.partition, buffers_.params(), plan_.dtype);
    }
  }
  if (coordinator_) coordinator_->invalidate();
  buffers_.invalidate_weights();
}

StepOutcome ZeroEngine::step() {
  StepOutcome out;
  out.loss_scale = scaler_.scale();
  // OnebitAdam and OnebitLamb past their warm-up, and ZeroOneAdam between its variance steps,
  // keep each rank's gradient its own (DeepSpeed's enable_backward_allreduce = False): what they
  // all-reduce is compressed, the momentum or the gradient or the weights' motion.
  const bool compressed = local_gradients(config_.optimizer, optimizer_rule_.step_count() + 1);
  const double ranks_summed = compressed ? 1.0 : double(plan_.world) * (replicas_ ? replicas_->size() : 1);
  if (!compressed) reducer_.reduce_at_step();
  if (replicas_) {  // MiCS: each shard group's partition of the gradient summed over the groups
    for (size_t lo = 0; lo < plan_.grads_count; lo += replicas_->max_collective_elements()) {
      const size_t n = std::min(replicas_->max_collective_elements(), plan_.grads_count - lo);
      replicas_->all_reduce(buffers_.grad_at(plan_.grads_base + lo), n, plan_.grad_dtype, compute_)->wait(compute_);
    }
    optimizer_.gradient_final(plan_.grads_base, plan_.grads_base + plan_.grads_count);  // to the host, if offloaded
  }
  micro_step_ = 0;
  offload_prefetched_ = false;
  const double local = local_grad_sum_squares();
  // Stage 0: every rank holds the whole reduced gradient. Otherwise each holds a partition, and
  // the sum over ranks makes the norm, and any inf/NaN, the same everywhere. Local gradients
  // (the 1-bit optimizers' compressed steps) are clipped by the mean of the ranks' own norms, as
  // DeepSpeed's fp32 path does (clip_grad_norm_ averages them over the data-parallel group; its
  // fp16 and bf16 wrappers clip each rank by its own): one coefficient on every rank in every
  // dtype, and an inf/NaN on one rank is seen by all.
  double sum_sq = plan_.optimizer_replicated() ? local : control_.all_reduce_sum(local);
  if (compressed && plan_.world > 1) {
    const double mean = control_.all_reduce_sum(std::sqrt(local)) / double(plan_.world);
    sum_sq = mean * mean;
  }
  const bool overflow = !std::isfinite(sum_sq);
  out.grad_norm = std::sqrt(sum_sq) / out.loss_scale / ranks_summed;
  const ScheduledValues sched = scheduler_.current();
  out.lr = sched.lr;
  if (overflow && (config_.fp16.enabled || (config_.bf16 && config_.bf16_check_grad_overflow))) {
    // DeepSpeed's fp16 and bf16 optimizers: skip the update, keep the schedule where it is, and
    // (fp16) lower the loss scale.
    out.skipped = true;
    scaler_.update(true);
    buffers_.zero_grads();
    apply_delayed_update();  // the previous step's update was not skipped
    return out;
  }
  ZT_CHECK(!overflow, "the gradient norm is not finite (", sum_sq, ") in ", dtype_name(plan_.dtype),
           " training: the loss diverged; lower the learning rate or enable gradient clipping",
           config_.bf16 ? " (bf16.check_grad_overflow: true skips such steps)" : "");
  const double clip = clip_coefficient(out.grad_norm, config_.gradient_clipping);
  const double beta1 = sched.beta1.value_or(config_.optimizer.beta1);
  const double beta2 = sched.beta2.value_or(config_.optimizer.beta2);
  // Gradients are sums over ranks of loss-scaled values: divide by both here, in the same pass.
  // --delayed_param_update: past its warm-up, the offloaded part's CPU Adam runs beside the next
  // step's forward and backward, which see the parameters before this update.
  const bool delay = plan_.delayed_update_after >= 0 && optimizer_rule_.step_count() >= plan_.delayed_update_after;
  const OptimizerStepArgs args =
      optimizer_rule_.begin_step(sched.lr, beta1, beta2, clip / (out.loss_scale * ranks_summed));
  if (args.rule == UpdateRule::kLamb) {
    lamb_step(args);
  } else if (args.rule == UpdateRule::kOneBitLamb) {
    onebit_lamb_step(args, compressed);
  } else if (args.rule == UpdateRule::kMuon) {
    muon_step(args);
  } else if (args.rule == UpdateRule::kOneBitAdam) {
    onebit_step(args, compressed);
  } else if (args.rule == UpdateRule::kZeroOneAdam) {
    zero_one_step(args, sched.lr);
  } else if (args.rule == UpdateRule::kAdafactor) {
    adafactor_step(args, sched.lr);
    if (config_.optimizer.relative_step && !config_.optimizer.adafactor_torch) out.lr = args.lr;  // the schedule's is unused
  } else {
    optimizer_.step(args, delay);
  }
  buffers_.zero_grads();
  share_parameters();
  scaler_.update(false);
  scheduler_.step();
  return out;
}

std::vector<float> ZeroEngine::lamb_step(const OptimizerStepArgs& args) {
  // Each tensor's norms span the ranks its elements are on: one small all-reduce of per-tensor
  // sums (two doubles a tensor) between the moments and the update. Stage 0 holds everything.
  std::vector<double> sums = optimizer_.lamb_norms(args);
  if (!plan_.optimizer_replicated() && plan_.world > 1) {
    control_.all_reduce_doubles(sums, false);
  } else {
    agree_on_replicated(sums);
  }
  std::vector<float> ratios(sums.size() / 2);
  for (size_t t = 0; t < ratios.size(); ++t) {
    ratios[t] = float(lamb_trust_ratio(config_.optimizer, sums[2 * t], sums[2 * t + 1]));
  }
  optimizer_.lamb_apply(args, ratios);
  return ratios;
}

void ZeroEngine::onebit_lamb_step(const OptimizerStepArgs& args, bool compressed) {
  const OptimizerConfig& o = config_.optimizer;
  const int64_t t = optimizer_rule_.step_count();
  if (t == 1) return;  // DeepSpeed's first step only sets up its buffers
  if (!compressed) {
    // The warm-up: Lamb on the averaged gradient, its ratios averaged for the compressed steps;
    // at freeze_step exp_avg_sq_fresh starts from exp_avg_sq (never, where that is step 1).
    const std::vector<float> ratios = lamb_step(args);
    for (size_t k = 0; k < ratios.size(); ++k) onebit_lamb_observe(o, ratios[k], lamb_tensors_[k]);
    if (t == o.freeze_step) {
      backend_.copy_async(optimizer_.exp_avg_sq_fresh(), optimizer_.exp_avg_sq(), plan_.device_count * sizeof(float),
                          compute_);
    }
    return;
  }
  if (lamb_tensors_[0].scaling == 0) {
    // Where compression starts: every tensor's momentum scaled to the same RMS, so that one
    // scale a chunk suits them all.
    std::vector<size_t> counts;
    for (const auto& [lo, hi] : layout_.tensor_ranges()) counts.push_back(hi - lo);
    std::vector<double> sums = optimizer_.exp_avg_sum_squares();
    agree_on_replicated(sums);
    onebit_lamb_set_scaling(sums, counts, lamb_tensors_);
  }
  std::vector<float> scales;
  for (const OneBitLambTensor& k : lamb_tensors_) scales.push_back(float(k.scaling));
  float* packed = packed_.data();
  optimizer_.onebit_lamb_momentum(args, scales, packed);
  if (onebit_) {
    // The packed momenta as they are (no gradient: it is in them already), then decompressed
    // in place. On one rank they are the all-reduce's result.
    onebit_->all_reduce(args, packed, nullptr, plan_.grad_dtype);
    backend_.optimizer_ops().onebit_decompress(onebit_->gathered(0), packed, packed_.size());
  }
  std::vector<double> sums = optimizer_.onebit_lamb_stats(args, scales, packed);
  agree_on_replicated(sums);
  std::vector<float> coefficients(lamb_tensors_.size());
  for (size_t k = 0; k < coefficients.size(); ++k) {
    coefficients[k] =
        float(onebit_lamb_coefficient(o, sums[3 * k], sums[3 * k + 1], sums[3 * k + 2], lamb_tensors_[k]));
  }
  optimizer_.lamb_apply(args, coefficients);
}

void ZeroEngine::agree_on_replicated(std::vector<double>& sums) {
  // Every rank holds the same state and computes the same sums, but a reduction's order (a GPU's
  // atomics) may round them apart: rank 0's, everyone's (x + 0 + ... is exact), so that no
  // coefficient, and no replica, ever parts.
  if (!plan_.optimizer_replicated() || plan_.world == 1) return;
  if (plan_.rank != 0) std::fill(sums.begin(), sums.end(), 0.0);
  control_.all_reduce_doubles(sums, false);
}

std::vector<double> ZeroEngine::onebit_lamb_scalars() const {
  std::vector<double> out;
  for (const OneBitLambTensor& k : lamb_tensors_) out.push_back(k.coeff_freeze);
  for (const OneBitLambTensor& k : lamb_tensors_) out.push_back(k.last_factor);
  for (const OneBitLambTensor& k : lamb_tensors_) out.push_back(k.scaling);
  return out;
}

void ZeroEngine::onebit_step(const OptimizerStepArgs& args, bool compressed) {
  const int64_t t = optimizer_rule_.step_count();
  if (t == 1) return;  // OnebitAdam's first step only sets up its buffers: no moment or weight moves
  if (!compressed) return optimizer_.step(args);  // the warm-up: Adam on the averaged gradient
  auto* exp_avg = static_cast<float*>(optimizer_.exp_avg());
  if (onebit_) {
    // The errors are zero where compression starts, as DeepSpeed's: only compressed steps write
    // them, and load() restores or zeroes them.
    onebit_->all_reduce(args, exp_avg, buffers_.grad_at(0), plan_.grad_dtype);
  } else {  // one rank: the momentum is the all-reduce's result already
    backend_.optimizer_ops().onebit_momentum_sums(args, exp_avg, buffers_.grad_at(0), plan_.grad_dtype,
                                                  layout_.flat_size(), nullptr, layout_.flat_size(), norm_sq_.data());
  }
  optimizer_.onebit_apply(args, onebit_.get());
}

void ZeroEngine::zero_one_step(const OptimizerStepArgs& args, double lr) {
  const OptimizerConfig& o = config_.optimizer;
  const int64_t t = optimizer_rule_.step_count();
  float* u = accumulator_.data();
  switch (zero_one_phase(o, t)) {
    case ZeroOnePhase::kSetUp: return;  // DeepSpeed's first step only sets up its buffers
    case ZeroOnePhase::kVariance: return optimizer_.step(args);  // Adam without bias correction
    case ZeroOnePhase::kCompressedGrad:
      if (onebit_) {
        // The gradient goes through the compression from the accumulator (unused until the
        // local phase, which starts it afresh): u = grad_scale g, beta1 0.
        OptimizerStepArgs gradient = args;
        gradient.beta1 = 0;
        onebit_->all_reduce(gradient, u, buffers_.grad_at(0), plan_.grad_dtype);
      }
      return optimizer_.zero_one_pass({ZeroOnePass::kCompressedGrad}, args, u, onebit_.get());
    case ZeroOnePhase::kLocal: break;
  }
  // DeepSpeed zeroes the errors once, where the local phase starts: from then on they are the
  // motions', no longer the gradients'.
  if (onebit_ && t == zero_one_first_local_step(o)) onebit_->reset_errors();
  optimizer_.zero_one_pass({ZeroOnePass::kLocal, 0.0f, !apart_}, args, u, nullptr);
  lrs_ += lr;
  apart_ = t % zero_one_local_interval(o, t) != 0;
  if (apart_) return;
  // The ranks meet: each one's motion since they last met, scaled by its d, all-reduced
  // compressed, becomes everyone's momentum and the weights' common motion.
  if (onebit_) {
    optimizer_.zero_one_pass({ZeroOnePass::kSyncPrepare}, args, u, nullptr);
    onebit_->all_reduce(args, u, nullptr, plan_.grad_dtype);
  }
  optimizer_.zero_one_pass({ZeroOnePass::kSync, float(lrs_)}, args, u, onebit_.get());
  lrs_ = 0;
}

void ZeroEngine::muon_step(const OptimizerStepArgs& args) {
  optimizer_.muon_momentum(args, muon_->updates());
  muon_->orthogonalize();
  optimizer_.muon_apply(args, muon_->updates());
}

void ZeroEngine::adafactor_step(const OptimizerStepArgs& args, double lr) {
  // A matrix's row and column means span the ranks its pieces are on: one all-reduce of every
  // matrix's sums. At stage 0 each rank sums its own partition's share of the whole gradient it
  // holds, so that every rank's factors stay alike bit for bit (the device's sums use atomics).
  const bool several = plan_.world > 1;
  const auto [lo, hi] = plan_.optimizer_replicated() ? plan_.partition.held(plan_.rank)
                                                      : std::pair<size_t, size_t>{plan_.opt_begin, plan_.opt_end()};
  optimizer_.adafactor_sums(args, *factors_, lo, hi);
  if (several) comm_.all_reduce(factors_->sums(), factors_->sum_count(), DType::kF32, compute_)->wait(compute_);
  factors_->update(args);
  // Each tensor's update RMS (and weight RMS, where the step scales by it): one small all-reduce.
  const OptimizerConfig& o = config_.optimizer;
  std::vector<double> sums = optimizer_.adafactor_norms(args, *factors_, o.scale_parameter);
  if (!plan_.optimizer_replicated() && several) control_.all_reduce_doubles(sums, false);
  const std::vector<std::pair<size_t, size_t>>& tensors = layout_.tensor_ranges();
  std::vector<AdafactorTensorStep> steps(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    steps[t] = adafactor_tensor_step(o, args.lr, lr, sums[2 * t], sums[2 * t + 1], tensors[t].second - tensors[t].first);
  }
  optimizer_.adafactor_apply(args, steps, *factors_);
}

std::pair<size_t, size_t> ZeroEngine::factor_extent() const {
  return factors_ ? AdafactorFactors::extent(layout_.tensor_shapes()) : std::pair<size_t, size_t>{0, 0};
}

double ZeroEngine::local_grad_sum_squares() {
  if (plan_.grads_on_host) {
    backend_.synchronize(compute_);  // the reductions into the host partition have run
    double sum = 0;
    host_optimizer_ops().sum_squares(buffers_.grad_at(plan_.opt_begin), plan_.grad_dtype, plan_.opt_count, &sum);
    return sum;
  }
  backend_.zero_async(norm_sq_.data(), sizeof(double), compute_);
  backend_.optimizer_ops().sum_squares(buffers_.grad_at(plan_.opt_begin), plan_.grad_dtype, plan_.opt_count,
                                       norm_sq_.data());
  backend_.copy_to_host(norm_sq_host_.data(), norm_sq_.data(), sizeof(double));
  return *norm_sq_host_.data();
}

std::vector<float> ZeroEngine::gather_master_weights() {
  apply_delayed_update();
  std::vector<float> full(plan_.partition.padded_size);
  if (plan_.optimizer_replicated()) {
    read_field(StateField::kMaster, 0, full.size(), full.data());
  } else {
    std::vector<float> mine(plan_.opt_count);
    read_field(StateField::kMaster, plan_.opt_begin, plan_.opt_count, mine.data());
    std::vector<size_t> counts(size_t(plan_.world), plan_.partition.partition_size);
    comm_.all_gather(mine.data(), full.data(), counts, DType::kF32, compute_)->synchronize();
  }
  full.resize(layout_.flat_size());
  return full;
}

void ZeroEngine::gather_params(size_t lo, size_t hi, void* out) {
  apply_delayed_update();
  if (coordinator_) return coordinator_->gather_params(lo, hi, out);
  backend_.copy_to_host(out, buffers_.param_at(lo), (hi - lo) * plan_.elem());
}

ModelStateBytes ZeroEngine::model_state_bytes() const {
  ModelStateBytes b = optimizer_.bytes().device;
  if (factors_) b.exp_avg_sq += AdafactorFactors::state_bytes(layout_.tensor_shapes());  // replicated, tiny
  b.params = buffers_.device_param_bytes();
  b.grads = buffers_.device_grad_bytes();
  return b;
}

ModelStateBytes ZeroEngine::offloaded_state_bytes() const {
  ModelStateBytes b = optimizer_.bytes().offloaded;
  const MixedPrecisionBuffers::Bytes own = buffers_.bytes();
  if (plan_.params_on_host) b.params = own.params;
  if (coordinator_) {
    const OffloadFootprint store = coordinator_->store_bytes();
    b.params += store.host_state + store.nvme;
  }
  if (plan_.grads_on_host) b.grads = own.grads;
  return b;
}

size_t ZeroEngine::shared_gradient_bytes() const {
  return (buffers_.grads_shared() ? buffers_.bytes().grads : 0) + reducer_.shared_bytes();
}

BufferBytes ZeroEngine::buffer_bytes() const {
  BufferBytes b;
  b.buckets = reducer_.buffer_bytes();
  b.gather = coordinator_ ? coordinator_->buffer_bytes() : 0;
  b.working = buffers_.bytes().working;
  b.offload = optimizer_.bytes().buffers + (coordinator_ ? coordinator_->store_bytes().buffers : 0);
  if (factors_ && plan_.offloaded > 0) b.offload += AdafactorFactors::host_copy_bytes(layout_.tensor_shapes());
  b.optimizer = muon_ ? muon_->bytes() : factors_ ? AdafactorFactors::buffer_bytes(layout_.tensor_shapes()) : 0;
  if (onebit_) b.optimizer = OneBitCompression::device_bytes(onebit_tensors(config_.optimizer, layout_), plan_.world);
  b.optimizer += accumulator_.bytes();  // ZeroOneAdam's momentum accumulator
  b.optimizer += packed_.bytes();       // OneBitLamb's packed momenta
  return b;
}

void ZeroEngine::load_zero_one_local(const StateSource& source) {
  // Between two meetings each rank's weights, exp_avg and accumulator are its own: restored
  // whole from its shard at the same world size, over what the shards' partitions gave.
  // Otherwise the checkpoint's weights and momentum are everyone's, as just met.
  lrs_ = 0;
  apart_ = false;
  backend_.zero_async(accumulator_.data(), accumulator_.bytes(), compute_);
  if (!source.with_moments || !source.read_zero_one_local) return;
  const size_t n = accumulator_.size();
  std::vector<float> local(3 * n);
  const std::optional<double> lrs = source.read_zero_one_local(plan_.rank, plan_.world, local.data(), local.size());
  if (!lrs) return;
  optimizer_.load_range(local.data(), local.data() + n);
  backend_.copy_from_host(accumulator_.data(), local.data() + 2 * n, n * sizeof(float));
  lrs_ = *lrs;
  apart_ = true;
}

size_t ZeroEngine::zero_one_local_count() const { return apart_ ? 3 * accumulator_.size() : 0; }

double ZeroEngine::read_zero_one_local(float* out) {
  const size_t n = accumulator_.size();
  optimizer_.read_field(StateField::kMaster, plan_.opt_begin, n, out);
  optimizer_.read_field(StateField::kExpAvg, plan_.opt_begin, n, out + n);
  backend_.copy_to_host(out + 2 * n, accumulator_.data(), n * sizeof(float));
  return lrs_;
}

EngineState ZeroEngine::state() const {
  EngineState s;
  s.adam_step = optimizer_rule_.step_count();
  s.scheduler_iteration = scheduler_.last_batch_iteration();
  s.scaler = scaler_.state();
  return s;
}

EngineState ZeroEngine::fresh_state() const {
  EngineState s;
  s.scaler = LossScaler(config_.fp16).state();  // adam_step 0, scheduler_iteration -1
  return s;
}

void ZeroEngine::load(const StateSource& source) {
  const size_t flat = layout_.flat_size();
  const bool moments = source.with_moments;
  // Reads [lo, hi) of a field into out, zero beyond the model (padding) and for moments the
  // source does not carry.
  const FieldReader read_padded = [&](StateField field, size_t lo, size_t hi, float* out) {
    const size_t model_hi = field == StateField::kMaster || moments ? std::min(hi, flat) : lo;
    if (model_hi > lo) source.read(field, lo, model_hi, out);
    if (hi > std::max(lo, model_hi)) std::fill(out + (std::max(lo, model_hi) - lo), out + (hi - lo), 0.0f);
  };
  optimizer_.load(read_padded, moments);
  if (factors_ && moments && source.read_factors) {
    const auto [rows, cols] = factor_extent();
    std::vector<float> r(rows), c(cols);
    source.read_factors(r.data(), rows, c.data(), cols);
    factors_->load(r.data(), c.data());
  } else if (factors_) {
    factors_->zero();
  }
  // OnebitAdam's compression errors are each rank's own and sized for its world size: restored
  // from a checkpoint of the same world size, else started afresh (DeepSpeed always does).
  if (onebit_) {
    std::vector<float> errors(onebit_->error_count());
    if (moments && source.read_onebit_errors &&
        source.read_onebit_errors(plan_.rank, plan_.world, errors.data(), errors.size())) {
      onebit_->load_errors(errors.data());
    } else {
      onebit_->reset_errors();
    }
  }
  if (plan_.world > 1 && plan_.optimizer_replicated()) {
    // Stage 0 keeps the whole optimizer state on every rank.
    const size_t chunk = allgather_chunk();
    if (moments && optimizer_.has(StateField::kExpAvg)) {
      all_gather_partitions(comm_, compute_, plan_.partition, optimizer_.exp_avg(), DType::kF32, chunk);
    }
    if (moments && optimizer_.has(StateField::kExpAvgSq) && config_.optimizer.aux_exp_avg_sq()) {  // packed, in place
      const std::vector<size_t> counts = optimizer_.aux_partition_counts();
      size_t mine = 0;
      for (int r = 0; r < plan_.rank; ++r) mine += counts[size_t(r)];
      float* packed = static_cast<float*>(optimizer_.exp_avg_sq());
      comm_.all_gather(packed + mine, packed, counts, DType::kF32, compute_)->wait(compute_);
    } else if (moments && optimizer_.has(StateField::kExpAvgSq)) {
      all_gather_partitions(comm_, compute_, plan_.partition, optimizer_.exp_avg_sq(), DType::kF32, chunk);
    }
    if (moments && optimizer_.has(StateField::kExpAvgSqFresh)) {
      all_gather_partitions(comm_, compute_, plan_.partition, optimizer_.exp_avg_sq_fresh(), DType::kF32, chunk);
    }
    if (plan_.has_master()) all_gather_partitions(comm_, compute_, plan_.partition, optimizer_.master(), DType::kF32, chunk);
  }
  if (plan_.world > 1 && plan_.params_replicated()) {
    all_gather_partitions(comm_, compute_, plan_.partition, buffers_.params(), plan_.dtype,
                          allgather_chunk());
  }
  if (accumulator_.size() > 0) load_zero_one_local(source);
  if (!lamb_tensors_.empty()) {
    // OneBitLamb's scalars are everyone's, at any world size: from the checkpoint, or as at step 0.
    std::vector<double> saved(3 * lamb_tensors_.size());
    const bool restored = moments && source.read_onebit_lamb && source.read_onebit_lamb(saved.data(), saved.size());
    const size_t n = lamb_tensors_.size();
    for (size_t k = 0; k < n; ++k) {
      lamb_tensors_[k] = restored ? OneBitLambTensor{saved[k], saved[n + k], saved[2 * n + k]} : OneBitLambTensor{};
    }
  }
  buffers_.zero_grads();
  micro_step_ = 0;
  if (coordinator_) coordinator_->invalidate();
  buffers_.invalidate_weights();
  const EngineState counters = source.counters.value_or(fresh_state());
  optimizer_rule_.set_step_count(counters.adam_step);
  scheduler_.set_last_batch_iteration(counters.scheduler_iteration);
  scaler_.restore(counters.scaler);
}

}  // namespace zt
