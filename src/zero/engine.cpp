#include "zero/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace zt {

ZeroEngine::ZeroEngine(const Gpt2Layout& layout, Backend& backend, DataComm& comm, HostComm& control,
                       const DsConfig& config)
    : layout_(layout), backend_(backend), compute_(backend.compute_stream()), comm_(comm), control_(control),
      opt_ops_(backend.optimizer_ops()), config_(config),
      stage_(config.zero.stage), world_(comm.size()), rank_(comm.rank()), dtype_(config.param_dtype()),
      comm_dtype_(config.communication_data_type.value_or(config.param_dtype())),
      partition_(layout.flat_size(), comm.size()), adam_(config.optimizer),
      scheduler_(config.scheduler, config.optimizer.lr), scaler_(config.fp16) {
  const size_t padded = partition_.padded_size, part = partition_.partition_size;
  opt_begin_ = stage_ == 0 ? 0 : partition_.begin(rank_);
  opt_count_ = stage_ == 0 ? padded : part;
  params_base_ = stage_ == 3 ? partition_.begin(rank_) : 0;
  grads_base_ = stage_ >= 2 ? partition_.begin(rank_) : 0;
  const OffloadConfig& off = config.zero.offload_optimizer;
  const OffloadConfig& off_param = config.zero.offload_param;
  // Partial offload (ratio < 1) keeps the first part of the range on the device.
  const size_t offloaded = off.enabled() ? size_t(std::llround(double(opt_count_) * off.ratio)) : 0;
  device_count_ = opt_count_ - offloaded;
  grads_on_host_ = stage_ == 3 && offloaded > 0 && device_count_ == 0;
  params_on_host_ = stage_ == 3 && off_param.enabled();
  const Pool param_pool = !params_on_host_ ? Pool::kDevice : off_param.pin_memory ? Pool::kPinned : Pool::kHost;
  const Pool grad_pool = !grads_on_host_ ? Pool::kDevice : off.pin_memory ? Pool::kPinned : Pool::kHost;
  const bool params_on_nvme = stage_ == 3 && off_param.device == OffloadConfig::Device::kNvme;
  ZT_USAGE_CHECK(!params_on_nvme || (offloaded > 0 && device_count_ == 0), config.source,
                 ": zero_optimization.offload_param.device: \"nvme\" needs offload_optimizer on \"cpu\" or "
                 "\"nvme\" with ratio 1 (the CPU Adam writes the updated parameters to the swap file)");
  if (!params_on_nvme) params_ = DeviceArray<unsigned char>(backend, (stage_ == 3 ? part : padded) * elem(), param_pool);
  grads_ = DeviceArray<unsigned char>(backend, (stage_ >= 2 ? part : padded) * elem(), grad_pool);
  if (dtype_ != DType::kF32) master_ = DeviceArray<float>(backend, device_count_);
  exp_avg_ = DeviceArray<float>(backend, device_count_);
  exp_avg_sq_ = DeviceArray<float>(backend, device_count_);
  zero_grads();
  norm_sq_ = DeviceArray<double>(backend, 1);
  norm_sq_host_ = DeviceArray<double>(backend, 1, Pool::kPinned);
  opt_ops_.zero(exp_avg_.data(), DType::kF32, device_count_);
  opt_ops_.zero(exp_avg_sq_.data(), DType::kF32, device_count_);
  if (offloaded > 0) {
    offload_ = std::make_unique<OptimizerOffload>(backend, off, config.aio, offloaded, size_t(config.zero.sub_group_size),
                                                  dtype_, rank_);
    if (!grads_on_host_) {
      host_grads_ = DeviceArray<unsigned char>(backend, offloaded * elem(), offload_->host_pool());
      d2h_stream_ = backend.create_stream("offload gradients");
      event_ = backend.create_event();
    }
  }

  size_t other = 0;  // the largest unit but the embeddings
  for (int u = 1; u < layout.num_units(); ++u) other = std::max(other, layout.unit_size(u));
  if (dtype_ != DType::kF32 && stage_ < 3) {
    // One slot for the embedding unit (the tied lm_head uses it at both ends), two for the rest.
    weight_slots_.resize(3);
    weight_slots_[0].data = DeviceArray<float>(backend, layout.unit_size(0));
    weight_slots_[1].data = DeviceArray<float>(backend, other);
    weight_slots_[2].data = DeviceArray<float>(backend, other);
  }
  if (dtype_ != DType::kF32 || stage_ >= 2) {
    grad_slots_.resize(2);
    grad_slots_[0].data = DeviceArray<float>(backend, layout.unit_size(0));
    grad_slots_[1].data = DeviceArray<float>(backend, other);
  }
  const size_t bucket = size_t(config.zero.reduce_bucket_size);
  if (stage_ >= 2) {
    bucketer_ = std::make_unique<GradBucketer>(backend, comm, partition_, comm_dtype_, bucket,
                                               config.zero.overlap_comm, config.zero.reduce_scatter, grads_.data(),
                                               dtype_);
    if (host_grads_.size() > 0) {
      // On the last micro-step a reduced range is final: send it to the host while backward goes on.
      bucketer_->on_reduced([this](size_t lo, size_t hi) {
        if (micro_step_ + 1 == config_.gradient_accumulation_steps) copy_grads_to_host(lo, hi);
      });
    }
  } else if (world_ > 1) {
    // Stage 0/1 reduce at the step in chunks: a send chunk in the communication dtype (when it
    // differs from the gradients') and, for stage 1, a receive chunk.
    const size_t chunk = collective_chunk(config.zero.reduce_bucket_size);
    const size_t send = comm_dtype_ != dtype_ ? chunk : 0, recv = stage_ == 1 ? std::min(chunk, part) : 0;
    staging_ = DeviceArray<unsigned char>(backend, (send + recv) * dtype_size(comm_dtype_));
  }
  if (stage_ == 3) {
    if (params_on_nvme) {
      auto swapper = std::make_unique<ParamSwapper>(backend, off_param, config.aio, part, dtype_,
                                                    largest_owned_slice(layout, partition_, rank_), rank_);
      param_swapper_ = swapper.get();
      param_store_ = std::move(swapper);
    } else {
      param_store_ = std::make_unique<HostParamStore>(params_.data(), dtype_, backend);
    }
    gatherer_ = std::make_unique<ParamGatherer>(layout, backend, comm, partition_, dtype_, *param_store_, config.zero);
  }
}

size_t ZeroEngine::collective_chunk(int64_t bucket_elements) const {
  return std::min({size_t(bucket_elements), partition_.padded_size, comm_.max_collective_elements()});
}

float* ZeroEngine::master_at(size_t flat) {
  // In fp32 the parameters are the master weights; params_ always covers the optimizer's range.
  if (dtype_ == DType::kF32) return reinterpret_cast<float*>(param_at(flat));
  return master_.data() + (flat - opt_begin_);
}

StateSource gpt2_init_source(const Gpt2Layout& layout, uint64_t seed) {
  return {[&layout, seed](StateField, size_t lo, size_t hi, float* out) { init_gpt2_params(layout, seed, out, lo, hi); },
          false, std::nullopt};
}

double ZeroEngine::backward_scale() const {
  return scaler_.scale() / double(config_.gradient_accumulation_steps);
}

float* ZeroEngine::working_slot(std::vector<Slot>& slots, int unit, bool& fresh) {
  fresh = false;
  if (unit == layout_.embedding_unit()) {
    fresh = slots[0].unit != unit;
    slots[0].unit = unit;
    return slots[0].data.data();
  }
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].unit == unit) return slots[i].data.data();
  }
  // Reuse the slot used least recently: slots[1] is always the newest.
  std::rotate(slots.begin() + 1, slots.end() - 1, slots.end());
  slots[1].unit = unit;
  fresh = true;
  return slots[1].data.data();
}

const float* ZeroEngine::acquire_weights(int unit) {
  if (gatherer_) return gatherer_->acquire(unit);
  const size_t offset = layout_.unit_offset(unit);
  if (dtype_ == DType::kF32) return reinterpret_cast<const float*>(param_at(offset));
  bool fresh = false;
  float* slot = working_slot(weight_slots_, unit, fresh);
  if (fresh) backend_.cast_async(param_at(offset), dtype_, slot, DType::kF32, layout_.unit_size(unit), compute_);
  return slot;
}

void ZeroEngine::release_weights(int unit) {
  // Stages 0-2 keep every parameter resident; the working slot stays valid until reused.
  if (gatherer_) gatherer_->release(unit);
}

float* ZeroEngine::grad_accumulator(int unit) {
  // The last backward of the step begins: the optimizer's first NVMe pieces can start reading.
  if (offload_ && !offload_prefetched_ && micro_step_ + 1 == config_.gradient_accumulation_steps) {
    offload_->prefetch();
    offload_prefetched_ = true;
  }
  if (grad_slots_.empty()) return reinterpret_cast<float*>(grad_at(layout_.unit_offset(unit)));
  bool fresh = false;
  float* slot = working_slot(grad_slots_, unit, fresh);
  backend_.zero_async(slot, layout_.unit_size(unit) * sizeof(float), compute_);
  return slot;
}

void ZeroEngine::grads_done(int unit) {
  if (grad_slots_.empty()) return;  // fp32 stage 0/1: accumulated in place
  const size_t offset = layout_.unit_offset(unit), n = layout_.unit_size(unit);
  bool fresh = false;
  float* slot = working_slot(grad_slots_, unit, fresh);
  ZT_CHECK(!fresh, "grads_done(", unit, ") without grad_accumulator");
  if (bucketer_) {
    bucketer_->add(offset, slot, n);
  } else {
    opt_ops_.accumulate_into(grad_at(offset), dtype_, slot, DType::kF32, n);
  }
}

void ZeroEngine::backward_done() {
  if (bucketer_) bucketer_->finish();
  ++micro_step_;
}

void ZeroEngine::copy_grads_to_host(size_t lo, size_t hi) {
  const size_t a = std::max(lo, offload_begin()), b = std::min(hi, opt_begin_ + opt_count_);
  if (b <= a) return;
  // After the compute stream's reduction into [a, b); backward goes on meanwhile.
  backend_.record(*event_, compute_);
  backend_.wait(*d2h_stream_, *event_);
  backend_.copy_async(host_grads_.data() + (a - offload_begin()) * elem(), grad_at(a), (b - a) * elem(), *d2h_stream_);
}

ParamSink ZeroEngine::param_sink() {
  const size_t base = offload_begin();
  if (param_swapper_) {
      return [this, base](size_t lo, size_t n, const void* src, Stream&) {
      param_swapper_->write(base + lo - partition_.begin(rank_), n, src);  // host memory and the file, at once
    };
  }
  return [this, base](size_t lo, size_t n, const void* src, Stream& stream) {
    backend_.copy_async(param_at(base + lo), src, n * elem(), stream);
  };
}

const void* ZeroEngine::offloaded_grads() {
  if (grads_on_host_) return grad_at(offload_begin());  // the compute stream was synchronised for the norm
  // Stage 2 copied each bucket during the last backward; stage 1 reduced only now.
  if (stage_ == 1) copy_grads_to_host(offload_begin(), opt_begin_ + opt_count_);
  backend_.synchronize(*d2h_stream_);
  return host_grads_.data();
}

// Stage 0: all-reduce the whole gradient. Stage 1: reduce-scatter it, so this rank's range of
// the full gradient buffer holds the sum over ranks. In chunks of reduce_bucket_size elements,
// through the communication dtype.
void ZeroEngine::reduce_full_gradients() {
  const size_t padded = partition_.padded_size;
  const size_t chunk = collective_chunk(config_.zero.reduce_bucket_size);
  const size_t celem = dtype_size(comm_dtype_);
  const bool same_dtype = comm_dtype_ == dtype_;
  unsigned char* send_stage = staging_.data();
  unsigned char* recv_stage = staging_.data() + (same_dtype ? 0 : chunk * celem);
  std::vector<std::shared_ptr<DataWork>> pending;
  for (size_t lo = 0; lo < padded; lo += chunk) {
    const size_t hi = std::min(padded, lo + chunk), n = hi - lo;
    void* send = grad_at(lo);
    if (!same_dtype) {
      backend_.cast_async(grad_at(lo), dtype_, send_stage, comm_dtype_, n, compute_);
      send = send_stage;
    }
    if (stage_ == 0) {
      auto work = comm_.all_reduce(send, n, comm_dtype_, compute_);
      if (same_dtype) {  // in place: queue every chunk, wait at the end
        pending.push_back(work);
        continue;
      }
      work->wait(compute_);
      backend_.cast_async(send_stage, comm_dtype_, grad_at(lo), dtype_, n, compute_);
      continue;
    }
    comm_.reduce_scatter(send, recv_stage, partition_.split(lo, hi), comm_dtype_, compute_)->wait(compute_);
    const size_t a = std::max(lo, partition_.begin(rank_)), b = std::min(hi, partition_.end(rank_));
    if (b > a) backend_.cast_async(recv_stage, comm_dtype_, grad_at(a), dtype_, b - a, compute_);
  }
  for (auto& w : pending) w->wait(compute_);
}

// Stages 1 and 2: every rank updated its own range; all-gather the updated 16-bit parameters
// (allgather_bucket_size elements at a time), or broadcast each range from its owner when
// allgather_partitions is false.
void ZeroEngine::share_parameters() {
  if (!config_.zero.allgather_partitions) {
    for (int r = 0; r < world_; ++r) {
      comm_.broadcast(param_at(partition_.begin(r)), partition_.partition_size, dtype_, r, compute_)->wait(compute_);
    }
    return;
  }
  all_gather_flat(params_.data(), dtype_);
}

void ZeroEngine::all_gather_flat(void* base, DType dtype) {
  auto* bytes = static_cast<unsigned char*>(base);
  const size_t padded = partition_.padded_size, esize = dtype_size(dtype);
  const size_t chunk = collective_chunk(config_.zero.allgather_bucket_size);
  std::vector<std::shared_ptr<DataWork>> pending;
  for (size_t lo = 0; lo < padded; lo += chunk) {
    const size_t hi = std::min(padded, lo + chunk);
    const size_t mine = std::min(hi, std::max(lo, partition_.begin(rank_)));
    pending.push_back(
        comm_.all_gather(bytes + mine * esize, bytes + lo * esize, partition_.split(lo, hi), dtype, compute_));
  }
  for (auto& w : pending) w->wait(compute_);
}

StepOutcome ZeroEngine::step() {
  StepOutcome out;
  out.loss_scale = scaler_.scale();
  micro_step_ = 0;
  offload_prefetched_ = false;
  if (stage_ <= 1 && world_ > 1) reduce_full_gradients();
  const double local = local_grad_sum_squares();
  // Stage 0: every rank holds the whole reduced gradient. Otherwise each holds a partition, and
  // the sum over ranks makes the norm, and any inf/NaN, the same everywhere.
  const double sum_sq = stage_ == 0 ? local : control_.all_reduce_sum(local);
  const bool overflow = !std::isfinite(sum_sq);
  out.grad_norm = std::sqrt(sum_sq) / out.loss_scale / double(world_);
  const ScheduledValues sched = scheduler_.current();
  out.lr = sched.lr;
  if (overflow && (config_.fp16.enabled || (config_.bf16 && config_.bf16_check_grad_overflow))) {
    // DeepSpeed's fp16 and bf16 optimizers: skip the update, keep the schedule where it is, and
    // (fp16) lower the loss scale.
    out.skipped = true;
    scaler_.update(true);
    zero_grads();
    return out;
  }
  ZT_CHECK(!overflow, "the gradient norm is not finite (", sum_sq, ") in ", dtype_name(dtype_),
           " training: the loss diverged; lower the learning rate or enable gradient clipping",
           config_.bf16 ? " (bf16.check_grad_overflow: true skips such steps)" : "");
  const double clip = clip_coefficient(out.grad_norm, config_.gradient_clipping);
  const double beta1 = sched.beta1.value_or(config_.optimizer.beta1);
  const double beta2 = sched.beta2.value_or(config_.optimizer.beta2);
  // Gradients are sums over ranks of loss-scaled values: divide by both here, in the same pass.
  AdamStepArgs args = adam_.begin_step(sched.lr, beta1, beta2, clip / (out.loss_scale * double(world_)));
  if (device_count_ > 0) {
    opt_ops_.adam_step(args, master_at(opt_begin_), exp_avg_.data(), exp_avg_sq_.data(), grad_at(opt_begin_), dtype_,
                       param_at(opt_begin_), dtype_, device_count_);
  }
  if (offload_) {
    offload_->adam_step(args, offloaded_grads(), dtype_, param_sink());
    backend_.wait(compute_, offload_->params_written());
  }
  zero_grads();
  if ((stage_ == 1 || stage_ == 2) && world_ > 1) share_parameters();
  if (gatherer_) gatherer_->invalidate();
  for (auto& s : weight_slots_) s.unit = -1;  // the weights changed: working copies are stale
  scaler_.update(false);
  scheduler_.step();
  return out;
}

std::vector<float> ZeroEngine::gather_master_weights() {
  std::vector<float> full(partition_.padded_size);
  if (stage_ == 0) {
    read_field(StateField::kMaster, 0, full.size(), full.data());
  } else {
    std::vector<float> mine(opt_count_);
    read_field(StateField::kMaster, opt_begin_, opt_count_, mine.data());
    std::vector<size_t> counts(size_t(world_), partition_.partition_size);
    comm_.all_gather(mine.data(), full.data(), counts, DType::kF32, compute_)->synchronize();
  }
  full.resize(layout_.flat_size());
  return full;
}

ModelStateBytes ZeroEngine::model_state_bytes() const {
  ModelStateBytes b;
  b.params = params_on_host_ ? 0 : params_.bytes();
  b.grads = grads_on_host_ ? 0 : grads_.bytes();
  b.master = master_.bytes();
  b.exp_avg = exp_avg_.bytes();
  b.exp_avg_sq = exp_avg_sq_.bytes();
  return b;
}

ModelStateBytes ZeroEngine::offloaded_state_bytes() const {
  ModelStateBytes b;
  b.params = params_on_host_ ? params_.bytes() : 0;
  if (param_swapper_) b.params = param_swapper_->host_bytes() + param_swapper_->nvme_bytes();
  b.grads = grads_on_host_ ? grads_.bytes() : host_grads_.bytes();
  if (offload_) {
    // In host memory, or in the swap file (whose size is the three fields, padded per piece).
    const size_t field = offload_->on_nvme() ? offload_->nvme_bytes() / 3 : offload_->host_state_bytes() / 3;
    b.master = b.exp_avg = b.exp_avg_sq = field;
  }
  return b;
}

BufferBytes ZeroEngine::buffer_bytes() const {
  BufferBytes b;
  b.buckets = staging_.bytes() + (bucketer_ ? bucketer_->buffer_bytes() : 0);
  b.gather = gatherer_ ? gatherer_->buffer_bytes() : 0;
  for (const auto& s : weight_slots_) b.working += s.data.bytes();
  for (const auto& s : grad_slots_) b.working += s.data.bytes();
  b.offload = (offload_ ? offload_->buffer_bytes() : 0) + (param_swapper_ ? param_swapper_->buffer_bytes() : 0);
  return b;
}

}  // namespace zt

namespace zt {

void ZeroEngine::read_field(StateField field, size_t lo, size_t n, float* out) {
  const size_t hi = lo + n, opt_end = opt_begin_ + opt_count_;
  ZT_CHECK(lo >= opt_begin_ && hi <= opt_end, "[", lo, ", ", hi, ") is outside this rank's range");
  // The device part.
  const size_t dev_hi = std::min(hi, offload_begin());
  if (dev_hi > lo) {
    const float* src = field == StateField::kMaster   ? master_at(lo)
                       : field == StateField::kExpAvg ? exp_avg_.data() + (lo - opt_begin_)
                                                      : exp_avg_sq_.data() + (lo - opt_begin_);
    backend_.copy_to_host(out, src, (dev_hi - lo) * sizeof(float));
  }
  // The offloaded part.
  const size_t off_lo = std::max(lo, offload_begin());
  if (hi > off_lo) {
    offload_->visit(off_lo - offload_begin(), hi - offload_begin(), SwapMode::kRead, [&](const OffloadPiece& p) {
      const float* src = field == StateField::kMaster ? p.master : field == StateField::kExpAvg ? p.exp_avg : p.exp_avg_sq;
      std::memcpy(out + (offload_begin() + p.lo - lo), src, p.n * sizeof(float));
    });
  }
}

void ZeroEngine::load_to_device(const std::function<void(size_t lo, size_t hi, float* out)>& read, size_t lo,
                                size_t hi, float* device) {
  // The source writes host memory; the device gets it piece by piece (16 MiB of host memory).
  constexpr size_t kPiece = size_t(4) << 20;
  std::vector<float> piece(std::min(kPiece, hi - lo));
  for (size_t a = lo; a < hi; a += kPiece) {
    const size_t b = std::min(hi, a + kPiece);
    read(a, b, piece.data());
    backend_.copy_from_host(device + (a - lo), piece.data(), (b - a) * sizeof(float));
  }
}

double ZeroEngine::local_grad_sum_squares() {
  if (grads_on_host_) {
    backend_.synchronize(compute_);  // the reductions into the host partition have run
    double sum = 0;
    host_optimizer_ops().sum_squares(grad_at(opt_begin_), dtype_, opt_count_, &sum);
    return sum;
  }
  backend_.zero_async(norm_sq_.data(), sizeof(double), compute_);
  opt_ops_.sum_squares(grad_at(opt_begin_), dtype_, opt_count_, norm_sq_.data());
  backend_.copy_to_host(norm_sq_host_.data(), norm_sq_.data(), sizeof(double));
  return *norm_sq_host_.data();
}

void ZeroEngine::zero_grads() {
  if (grads_on_host_) {
    backend_.synchronize(compute_);  // nothing reduces into them any more
    host_optimizer_ops().zero(grads_.data(), dtype_, grads_.size() / elem());
    return;
  }
  opt_ops_.zero(grads_.data(), dtype_, grads_.size() / elem());
}

void ZeroEngine::gather_params(size_t lo, size_t hi, void* out) {
  if (stage_ < 3) {
    backend_.copy_to_host(out, param_at(lo), (hi - lo) * elem());
    return;
  }
  const size_t begin = partition_.begin(rank_), end = partition_.end(rank_);
  const size_t a = std::min(std::max(lo, begin), end), b = std::max(std::min(hi, end), a);
  const void* mine = param_store_->acquire(a - begin, b - begin);
  comm_.all_gather(mine, out, partition_.split(lo, hi), dtype_, compute_)->synchronize();
  param_store_->release(mine);
}

EngineState ZeroEngine::state() const {
  EngineState s;
  s.adam_step = adam_.step_count();
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
  auto read_padded = [&](StateField field, size_t lo, size_t hi, float* out) {
    const size_t model_hi = field == StateField::kMaster || moments ? std::min(hi, flat) : lo;
    if (model_hi > lo) source.read(field, lo, model_hi, out);
    if (hi > std::max(lo, model_hi)) std::fill(out + (std::max(lo, model_hi) - lo), out + (hi - lo), 0.0f);
  };
  // This rank's partition of every field (params_, master and moments all cover it at any
  // stage), then the parameters rounded from the master weights.
  const size_t lo = partition_.begin(rank_), hi = std::min(partition_.end(rank_), offload_begin());
  if (!moments) {  // the whole device range, not just the partition: no all-gather of zeros below
    opt_ops_.zero(exp_avg_.data(), DType::kF32, device_count_);
    opt_ops_.zero(exp_avg_sq_.data(), DType::kF32, device_count_);
  }
  auto field_reader = [&](StateField field) {
    return [&, field](size_t a, size_t b, float* out) { read_padded(field, a, b, out); };
  };
  if (hi > lo) {
    if (moments) {
      load_to_device(field_reader(StateField::kExpAvg), lo, hi, exp_avg_.data() + (lo - opt_begin_));
      load_to_device(field_reader(StateField::kExpAvgSq), lo, hi, exp_avg_sq_.data() + (lo - opt_begin_));
    }
    load_to_device(field_reader(StateField::kMaster), lo, hi, master_at(lo));
    if (dtype_ != DType::kF32) backend_.cast_async(master_at(lo), DType::kF32, param_at(lo), dtype_, hi - lo, compute_);
  }
  if (offload_) {
    // Straight into the offloaded state (through the swap buffers on NVMe), then the parameters.
    const size_t base = offload_begin();
    offload_->visit(0, offload_->size(), SwapMode::kWrite, [&](const OffloadPiece& p) {
      read_padded(StateField::kExpAvg, base + p.lo, base + p.lo + p.n, p.exp_avg);
      read_padded(StateField::kExpAvgSq, base + p.lo, base + p.lo + p.n, p.exp_avg_sq);
      read_padded(StateField::kMaster, base + p.lo, base + p.lo + p.n, p.master);
    });
    offload_->copy_params_from_master(param_sink());
    backend_.wait(compute_, offload_->params_written());
  }
  if (world_ > 1 && stage_ == 0) {
    // Stage 0 keeps everything whole on every rank.
    if (moments) {
      all_gather_flat(exp_avg_.data(), DType::kF32);
      all_gather_flat(exp_avg_sq_.data(), DType::kF32);
    }
    if (dtype_ != DType::kF32) all_gather_flat(master_.data(), DType::kF32);
  }
  if (world_ > 1 && stage_ <= 2) all_gather_flat(params_.data(), dtype_);  // stages 0-2 hold every parameter
  zero_grads();
  micro_step_ = 0;
  if (gatherer_) gatherer_->invalidate();
  for (auto& s : weight_slots_) s.unit = -1;
  const EngineState counters = source.counters.value_or(fresh_state());
  adam_.set_step_count(counters.adam_step);
  scheduler_.set_last_batch_iteration(counters.scheduler_iteration);
  scaler_.restore(counters.scaler);
}

}  // namespace zt
