#include "zero/optimizer_partition.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {

// Stage 3 with the whole range offloaded reduces straight into host memory; otherwise the
// offloaded range's gradient is copied to the host.
bool copies_gradients(const ZeroPlan& plan) { return plan.offloaded > 0 && !plan.grads_on_host; }

// Muon and Adafactor: the elements of flat [lo, hi) in tensors that keep exp_avg_sq (Muon's
// AdamW tensors, Adafactor's 1-D ones); with `start`, each such tensor's packed offset of its
// first element there.
size_t aux_elements(size_t lo, size_t hi, const std::vector<std::pair<size_t, size_t>>& tensors,
                    const std::vector<TensorShape>& shapes, const OptimizerConfig& opt,
                    std::vector<size_t>* start = nullptr) {
  if (start) start->assign(tensors.size(), SIZE_MAX);
  size_t n = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const size_t a = std::max(lo, tensors[t].first), b = std::min(hi, tensors[t].second);
    if (b <= a || !keeps_exp_avg_sq(opt, shapes[t])) continue;
    if (start) (*start)[t] = n;
    n += b - a;
  }
  return n;
}

}  // namespace

OptimizerPartition::Bytes OptimizerPartition::sizes(const ZeroPlan& plan, const DsConfig& config,
                                                    const std::vector<std::pair<size_t, size_t>>& tensors,
                                                    const std::vector<TensorShape>& shapes) {
  Bytes b;
  const OffloadConfig& off = config.zero.offload_optimizer;
  const OptimizerConfig& opt = config.optimizer;
  b.device.master = plan.has_master() ? plan.device_count * sizeof(float) : 0;
  b.device.exp_avg = opt.has_exp_avg() ? plan.device_count * sizeof(float) : 0;
  b.device.exp_avg_sq = opt.has_exp_avg_sq() ? plan.device_count * sizeof(float) : 0;
  if (opt.has_exp_avg_sq_fresh()) b.device.exp_avg_sq += plan.device_count * sizeof(float);
  if (opt.aux_exp_avg_sq()) {
    ZT_CHECK(tensors.size() == shapes.size() && !tensors.empty(), optimizer_name(opt.type),
             "'s state sizes need the model's tensors");
    b.device.exp_avg_sq = aux_elements(plan.opt_begin, plan.offload_begin(), tensors, shapes, opt) * sizeof(float);
  }
  b.host_pool = plan.offloaded_optimizer_pool;
  if (plan.offloaded == 0) return b;
  const OffloadFootprint f =
      OptimizerOffload::footprint(off, opt, plan.offloaded, size_t(config.zero.sub_group_size), plan.dtype);
  // Each field is an equal share of the state, in host memory or in the file.
  const size_t field = (f.host_state + f.nvme) / size_t(1 + opt.moment_count());
  b.offloaded.master = field;
  b.offloaded.exp_avg = opt.has_exp_avg() ? field : 0;
  b.offloaded.exp_avg_sq = opt.has_exp_avg_sq() ? field : 0;
  if (opt.factored()) {  // Adafactor: its 1-D tensors' exp_avg_sq, packed in host memory
    b.offloaded.exp_avg_sq = aux_elements(plan.offload_begin(), plan.opt_end(), tensors, shapes, opt) * sizeof(float);
  }
  if (copies_gradients(plan)) b.offloaded.grads = plan.offloaded * plan.grad_elem();
  b.host = f.host_state + b.offloaded.grads + (opt.factored() ? b.offloaded.exp_avg_sq : 0);
  b.nvme = f.nvme;
  b.buffers = f.buffers + (plan.delayed_update_after >= 0 ? plan.offloaded * plan.elem() : 0) +
              (opt.type == OptimizerConfig::Type::kMuon ? plan.offloaded * sizeof(float) : 0);  // Muon's updates on the host
  return b;
}

OptimizerPartition::OptimizerPartition(const ZeroPlan& plan, const DsConfig& config, Backend& backend,
                                       MixedPrecisionBuffers& buffers, ParamStore* swapped_params,
                                       std::vector<std::pair<size_t, size_t>> tensors, std::vector<TensorShape> shapes)
    : plan_(plan), backend_(backend), compute_(backend.compute_stream()), ops_(backend.optimizer_ops()),
      buffers_(buffers), swapped_params_(swapped_params), has_exp_avg_(config.optimizer.has_exp_avg()),
      has_exp_avg_sq_(config.optimizer.has_exp_avg_sq()), opt_(config.optimizer), tensors_(std::move(tensors)),
      shapes_(std::move(shapes)) {
  if (config.optimizer.type == OptimizerConfig::Type::kLamb || config.optimizer.factored() ||
      config.optimizer.type == OptimizerConfig::Type::kOneBitLamb) {
    ZT_CHECK(!tensors_.empty(), optimizer_name(config.optimizer.type), " needs the model's tensors");
    const size_t per_tensor = config.optimizer.type == OptimizerConfig::Type::kOneBitLamb ? 3 : 2;
    tensor_sums_ = DeviceArray<double>(backend, per_tensor * tensors_.size());
  }
  size_t sq_count = plan.device_count;
  if (config.optimizer.aux_exp_avg_sq()) {
    ZT_CHECK(!tensors_.empty() && shapes_.size() == tensors_.size(), optimizer_name(config.optimizer.type),
             " needs the model's tensors and shapes");
    sq_count = aux_elements(plan.opt_begin, plan.offload_begin(), tensors_, shapes_, opt_, &aux_start_);
  }
  if (plan.has_master()) master_ = DeviceArray<float>(backend, plan.device_count);
  if (has_exp_avg_) exp_avg_ = DeviceArray<float>(backend, plan.device_count);
  if (has_exp_avg_sq_) exp_avg_sq_ = DeviceArray<float>(backend, sq_count);
  if (config.optimizer.has_exp_avg_sq_fresh()) {
    ZT_CHECK(plan.offloaded == 0, "OneBitLamb's state is never offloaded (it runs at stage 0)");
    exp_avg_sq_fresh_ = DeviceArray<float>(backend, plan.device_count);
  }
  zero_moments();
  if (plan.offloaded == 0) return;
  offload_ = std::make_unique<OptimizerOffload>(backend, config.zero.offload_optimizer, config.optimizer, config.aio,
                                                plan.offloaded, size_t(config.zero.sub_group_size), plan.dtype,
                                                plan.rank);
  if (copies_gradients(plan)) {
    host_grads_ = DeviceArray<unsigned char>(backend, plan.offloaded * plan.grad_elem(), offload_->host_pool());
    d2h_stream_ = backend.create_stream("offload gradients");
    event_ = backend.create_event();
  }
  if (config.optimizer.type == OptimizerConfig::Type::kMuon) {
    host_updates_ = DeviceArray<float>(backend, plan.offloaded, offload_->host_pool());
  }
  if (config.optimizer.factored()) {
    const size_t n = aux_elements(plan.offload_begin(), plan.opt_end(), tensors_, shapes_, opt_, &host_aux_start_);
    host_aux_sq_ = DeviceArray<float>(backend, n, offload_->host_pool());
    if (n > 0) host_optimizer_ops().zero(host_aux_sq_.data(), DType::kF32, n);
  }
  if (plan.delayed_update_after >= 0) {
    pending_params_ = DeviceArray<unsigned char>(backend, plan.offloaded * plan.elem(), offload_->host_pool());
    h2d_stream_ = backend.create_stream("delayed parameter upload");
    h2d_ready_ = backend.create_event();
    h2d_done_ = backend.create_event();
  }
}

void OptimizerPartition::zero_moments() {
  for (DeviceArray<float>* m : {&exp_avg_, &exp_avg_sq_, &exp_avg_sq_fresh_}) {
    if (m->size() > 0) ops_.zero(m->data(), DType::kF32, m->size());
  }
}

OptimizerPartition::~OptimizerPartition() {
  // The thread reads the state and writes pending_params_: it ends before they go.
  if (update_.joinable()) update_.join();
}

void OptimizerPartition::join_update() {
  if (!update_.joinable()) return;
  update_.join();
  if (update_error_) {
    pending_ = false;  // half an update: nothing to apply, and the run ends with the error
    sent_.clear();
    std::rethrow_exception(std::exchange(update_error_, nullptr));
  }
}

void OptimizerPartition::upload_pending(size_t lo, size_t hi) {
  backend_.record(*h2d_ready_, compute_);
  backend_.wait(*h2d_stream_, *h2d_ready_);
  backend_.copy_async(buffers_.param_at(lo), pending_params_.data() + (lo - plan_.offload_begin()) * plan_.elem(),
                      (hi - lo) * plan_.elem(), *h2d_stream_);
  sent_.emplace_back(lo, hi);
}

void OptimizerPartition::params_free(size_t lo, size_t hi) {
  // Never a wait in backward: an update still running leaves this range to the step, and so
  // does pageable memory, whose "async" copies wait for the stream on a GPU.
  if (!pending_ || !update_done_.load(std::memory_order_acquire) || offload_->host_pool() != Pool::kPinned) return;
  const size_t a = std::max(lo, plan_.offload_begin()), b = std::min(hi, plan_.opt_end());
  if (b <= a) return;
  join_update();  // done: returns at once
  upload_pending(a, b);
}

void OptimizerPartition::apply_delayed() {
  if (!pending_) return;
  join_update();
  // What the last backward did not send: padding, units outside it, or all of it when the
  // update is applied at a checkpoint or an evaluation.
  std::sort(sent_.begin(), sent_.end());
  size_t at = plan_.offload_begin();
  std::vector<std::pair<size_t, size_t>> gaps;
  for (const auto& [lo, hi] : sent_) {
    if (lo > at) gaps.emplace_back(at, lo);
    at = std::max(at, hi);
  }
  if (at < plan_.opt_end()) gaps.emplace_back(at, plan_.opt_end());
  for (const auto& [lo, hi] : gaps) upload_pending(lo, hi);
  backend_.record(*h2d_done_, *h2d_stream_);
  backend_.wait(compute_, *h2d_done_);
  sent_.clear();
  pending_ = false;
}

float* OptimizerPartition::master_at(size_t flat) {
  if (!plan_.has_master()) return reinterpret_cast<float*>(buffers_.param_at(flat));
  return master_.data() + (flat - plan_.opt_begin);
}

void OptimizerPartition::prefetch() {
  if (!offload_ || !offload_->on_nvme()) return;
  join_update();  // the update's walk owns the swap buffers until it ends
  offload_->prefetch();
}

void OptimizerPartition::gradient_final(size_t lo, size_t hi) {
  if (!copies_gradients(plan_)) return;
  const size_t a = std::max(lo, plan_.offload_begin()), b = std::min(hi, plan_.opt_end());
  if (b <= a) return;
  join_update();  // the update in flight reads the previous step's gradient from host_grads_
  // After the compute stream's reduction into [a, b); backward goes on meanwhile.
  backend_.record(*event_, compute_);
  backend_.wait(*d2h_stream_, *event_);
  backend_.copy_async(host_grads_.data() + (a - plan_.offload_begin()) * plan_.grad_elem(), buffers_.grad_at(a),
                      (b - a) * plan_.grad_elem(), *d2h_stream_);
}

const void* OptimizerPartition::offloaded_grads() {
  // Host memory already: the compute stream was synchronised for the gradient norm.
  if (!copies_gradients(plan_)) return buffers_.grad_at(plan_.offload_begin());
  backend_.synchronize(*d2h_stream_);
  return host_grads_.data();
}

ParamSink OptimizerPartition::param_sink() {
  const size_t base = plan_.offload_begin();
  if (swapped_params_) {
    return [this, base](size_t lo, size_t n, const void* src, Stream&) {
      swapped_params_->write(base + lo - plan_.partition.begin(plan_.rank), n, src);  // memory and file, at once
    };
  }
  return [this, base](size_t lo, size_t n, const void* src, Stream& stream) {
    backend_.copy_async(buffers_.param_at(base + lo), src, n * plan_.elem(), stream);
  };
}

void OptimizerPartition::step(const OptimizerStepArgs& args, bool delay) {
  ZT_CHECK(!delay || pending_params_.bytes() > 0, "a delayed update asked of an optimizer built without one");
  if (plan_.device_count > 0) {
    const size_t lo = plan_.opt_begin;
    ops_.step(args, master_at(lo), exp_avg_.data(), exp_avg_sq_.data(), buffers_.grad_at(lo), plan_.grad_dtype,
              buffers_.param_at(lo), plan_.dtype, plan_.device_count);
  }
  if (!offload_) return;
  apply_delayed();
  const void* grads = offloaded_grads();
  if (!delay) {
    offload_->step(args, grads, plan_.grad_dtype, param_sink());
    backend_.wait(compute_, offload_->params_written());
    return;
  }
  // The previous update's copies read pending_params_, which the new one overwrites. The device
  // has run up to the gradient norm already; what waits here is the last of those copies.
  backend_.synchronize(*h2d_done_);
  update_done_.store(false, std::memory_order_relaxed);
  update_ = std::thread([this, args, grads] {
    try {
      offload_->step_to_host(args, grads, plan_.grad_dtype, pending_params_.data());
    } catch (...) {
      update_error_ = std::current_exception();
    }
    update_done_.store(true, std::memory_order_release);
  });
  pending_ = true;
}

template <typename Fn>
void OptimizerPartition::for_tensors(size_t lo, size_t hi, Fn fn) const {
  // The first tensor ending after lo; tensors are sorted and disjoint.
  auto it = std::upper_bound(tensors_.begin(), tensors_.end(), lo,
                             [](size_t x, const std::pair<size_t, size_t>& t) { return x < t.second; });
  for (; it != tensors_.end() && it->first < hi; ++it) {
    const size_t a = std::max(lo, it->first), b = std::min(hi, it->second);
    if (b > a) fn(size_t(it - tensors_.begin()), a, b);
  }
}

template <typename Fn>
void OptimizerPartition::send_params_by_tensor(Fn step) {
  const size_t base = plan_.offload_begin(), elem = plan_.elem();
  offload_->send_params(SwapMode::kReadWrite, [&](const OffloadPiece& p, void* staging) {
    auto* out = static_cast<unsigned char*>(staging);
    size_t done = base + p.lo;  // what of the piece is in the staging buffer
    const auto fill_gap = [&](size_t upto) {  // alignment gaps: the parameters rounded from the master
      const size_t at = done - base - p.lo;
      if (upto > done) convert(p.master + at, DType::kF32, out + at * elem, plan_.dtype, upto - done);
    };
    for_tensors(base + p.lo, base + p.lo + p.n, [&](size_t t, size_t a, size_t b) {
      fill_gap(a);
      const size_t at = a - base - p.lo;
      step(t, p, at, a, b - a, out + at * elem);
      done = b;
    });
    fill_gap(base + p.lo + p.n);
  }, param_sink());
  backend_.wait(compute_, offload_->params_written());
}

std::vector<double> OptimizerPartition::lamb_norms(const OptimizerStepArgs& args) {
  std::vector<double> sums(2 * tensors_.size(), 0.0);
  const size_t base = plan_.offload_begin();
  if (plan_.device_count > 0) {
    backend_.zero_async(tensor_sums_.data(), tensor_sums_.bytes(), compute_);
    for_tensors(plan_.opt_begin, base, [&](size_t t, size_t a, size_t b) {
      const size_t at = a - plan_.opt_begin;
      ops_.lamb_moments(args, master_at(a), exp_avg_.data() + at, exp_avg_sq_.data() + at, buffers_.grad_at(a),
                        plan_.grad_dtype, b - a, tensor_sums_.data() + 2 * t);
    });
    backend_.copy_to_host(sums.data(), tensor_sums_.data(), sums.size() * sizeof(double));
  }
  if (!offload_) return sums;
  const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
  OptimizerOps& host = host_optimizer_ops();
  offload_->visit(0, offload_->size(), SwapMode::kReadWrite, [&](const OffloadPiece& p) {
    for_tensors(base + p.lo, base + p.lo + p.n, [&](size_t t, size_t a, size_t b) {
      const size_t at = a - base - p.lo;
      host.lamb_moments(args, p.master + at, p.exp_avg + at, p.exp_avg_sq + at,
                        grads + (a - base) * plan_.grad_elem(), plan_.grad_dtype, b - a, sums.data() + 2 * t);
    });
  });
  return sums;
}

void OptimizerPartition::lamb_apply(const OptimizerStepArgs& args, const std::vector<float>& trust_ratios) {
  ZT_CHECK(trust_ratios.size() == tensors_.size(), "one trust ratio per tensor");
  const size_t base = plan_.offload_begin();
  for_tensors(plan_.opt_begin, base, [&](size_t t, size_t a, size_t b) {
    const size_t at = a - plan_.opt_begin;
    ops_.lamb_apply(args, trust_ratios[t], master_at(a), exp_avg_.data() + at, exp_avg_sq_.data() + at,
                    buffers_.param_at(a), plan_.dtype, b - a);
  });
  if (!offload_) return;
  OptimizerOps& host = host_optimizer_ops();
  send_params_by_tensor([&](size_t t, const OffloadPiece& p, size_t at, size_t, size_t n, void* out) {
    host.lamb_apply(args, trust_ratios[t], p.master + at, p.exp_avg + at, p.exp_avg_sq + at, out, plan_.dtype, n);
  });
}

float* OptimizerPartition::aux_exp_avg_sq(size_t t, size_t flat) {
  if (flat >= plan_.offload_begin()) {  // Adafactor's offloaded part, packed in host memory
    return host_aux_sq_.data() + host_aux_start_[t] + (flat - std::max(tensors_[t].first, plan_.offload_begin()));
  }
  return exp_avg_sq_.data() + aux_start_[t] + (flat - std::max(tensors_[t].first, plan_.opt_begin));
}

bool OptimizerPartition::keeps_sq(size_t t) const { return keeps_exp_avg_sq(opt_, shapes_[t]); }

AdafactorMoment OptimizerPartition::adafactor_moment(AdafactorFactors& factors, size_t t, size_t flat) {
  if (!factors.factored(t)) {
    AdafactorMoment v;
    v.exp_avg_sq = aux_exp_avg_sq(t, flat);
    return v;
  }
  // Where the element is stepped: the offloaded part by the CPU, from the factors' host copies.
  const size_t first = flat - tensors_[t].first;
  return flat >= plan_.offload_begin() ? factors.host_moment(t, first) : factors.moment(t, first);
}

void OptimizerPartition::muon_momentum(const OptimizerStepArgs& args, float* updates) {
  const size_t base = plan_.opt_begin, off = plan_.offload_begin();
  for_tensors(base, off, [&](size_t t, size_t a, size_t b) {
    if (!shapes_[t].hidden_matrix) {
      ops_.adam_step(args, master_at(a), exp_avg_.data() + (a - base), aux_exp_avg_sq(t, a), buffers_.grad_at(a),
                     plan_.grad_dtype, buffers_.param_at(a), plan_.dtype, b - a);
    } else {
      ops_.muon_momentum(args, exp_avg_.data() + (a - base), buffers_.grad_at(a), plan_.grad_dtype,
                         updates + (a - base), b - a);
    }
  });
  if (!offload_) return;
  // The offloaded part: the matrices' momentum on the CPU, their updates to the device for the
  // orthogonalisation (the AdamW tensors step in muon_apply, where the parameters are sent).
  const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
  OptimizerOps& host = host_optimizer_ops();
  offload_->visit(0, offload_->size(), SwapMode::kReadWrite, [&](const OffloadPiece& p) {
    for_tensors(off + p.lo, off + p.lo + p.n, [&](size_t t, size_t a, size_t b) {
      if (!shapes_[t].hidden_matrix) return;
      host.muon_momentum(args, p.exp_avg + (a - off - p.lo), grads + (a - off) * plan_.grad_elem(), plan_.grad_dtype,
                         host_updates_.data() + (a - off), b - a);
    });
  });
  backend_.copy_from_host(updates + plan_.device_count, host_updates_.data(), plan_.offloaded * sizeof(float));
}

void OptimizerPartition::muon_apply(const OptimizerStepArgs& args, const float* updates) {
  const size_t base = plan_.opt_begin, off = plan_.offload_begin();
  for_tensors(base, off, [&](size_t t, size_t a, size_t b) {
    if (!shapes_[t].hidden_matrix) return;
    ops_.muon_apply(args, master_at(a), updates + (a - base), buffers_.param_at(a), plan_.dtype, b - a);
  });
  if (!offload_) return;
  backend_.copy_to_host(host_updates_.data(), updates + plan_.device_count, plan_.offloaded * sizeof(float));
  const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
  OptimizerOps& host = host_optimizer_ops();
  send_params_by_tensor([&](size_t t, const OffloadPiece& p, size_t at, size_t a, size_t n, void* out) {
    if (shapes_[t].hidden_matrix) {
      host.muon_apply(args, p.master + at, host_updates_.data() + (a - off), out, plan_.dtype, n);
    } else {
      host.adam_step(args, p.master + at, p.exp_avg + at, p.exp_avg_sq + at, grads + (a - off) * plan_.grad_elem(),
                     plan_.grad_dtype, out, plan_.dtype, n);
    }
  });
}

void OptimizerPartition::adafactor_sums(const OptimizerStepArgs& args, AdafactorFactors& factors, size_t lo,
                                        size_t hi) {
  const size_t base = std::max(lo, plan_.opt_begin), off = plan_.offload_begin(), end = std::min(hi, plan_.opt_end());
  float* sums = factors.sums();
  if (offload_) {  // the CPU's sums over the offloaded gradient first; they start the device's
    float* host = factors.host_sums();
    std::fill(host, host + factors.sum_count(), 0.0f);
    const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
    OptimizerOps& cpu = host_optimizer_ops();
    for_tensors(std::max(base, off), end, [&](size_t t, size_t a, size_t b) {
      if (!factors.factored(t)) return;
      cpu.adafactor_sums(args, grads + (a - off) * plan_.grad_elem(), plan_.grad_dtype, b - a, a - tensors_[t].first,
                         shapes_[t].cols, factors.row_sums(host, t), factors.col_sums(host, t));
    });
    backend_.copy_from_host(sums, host, factors.sum_count() * sizeof(float));
  } else {
    ops_.zero(sums, DType::kF32, factors.sum_count());
  }
  for_tensors(base, std::min(end, off), [&](size_t t, size_t a, size_t b) {
    if (!factors.factored(t)) return;
    ops_.adafactor_sums(args, buffers_.grad_at(a), plan_.grad_dtype, b - a, a - tensors_[t].first, shapes_[t].cols,
                        factors.row_sums(sums, t), factors.col_sums(sums, t));
  });
}

std::vector<double> OptimizerPartition::adafactor_norms(const OptimizerStepArgs& args, AdafactorFactors& factors,
                                                        bool weight_norms) {
  std::vector<double> sums(2 * tensors_.size(), 0.0);
  const size_t base = plan_.offload_begin();
  if (plan_.device_count > 0) {
    backend_.zero_async(tensor_sums_.data(), tensor_sums_.bytes(), compute_);
    for_tensors(plan_.opt_begin, base, [&](size_t t, size_t a, size_t b) {
      ops_.adafactor_norms(args, weight_norms ? master_at(a) : nullptr, adafactor_moment(factors, t, a), buffers_.grad_at(a),
                           plan_.grad_dtype, b - a, tensor_sums_.data() + 2 * t);
    });
    backend_.copy_to_host(sums.data(), tensor_sums_.data(), sums.size() * sizeof(double));
  }
  if (!offload_) return sums;
  const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
  OptimizerOps& cpu = host_optimizer_ops();
  const auto norms = [&](size_t t, size_t a, size_t b, const float* master) {
    cpu.adafactor_norms(args, master, adafactor_moment(factors, t, a), grads + (a - base) * plan_.grad_elem(),
                        plan_.grad_dtype, b - a, sums.data() + 2 * t);
  };
  if (!weight_norms) {  // the gradient and the factors suffice: the state stays where it is
    for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) { norms(t, a, b, nullptr); });
    return sums;
  }
  offload_->visit(0, offload_->size(), SwapMode::kRead, [&](const OffloadPiece& p) {
    for_tensors(base + p.lo, base + p.lo + p.n, [&](size_t t, size_t a, size_t b) {
      norms(t, a, b, p.master + (a - base - p.lo));
    });
  });
  return sums;
}

void OptimizerPartition::adafactor_apply(const OptimizerStepArgs& args, const std::vector<AdafactorTensorStep>& steps,
                                         AdafactorFactors& factors) {
  ZT_CHECK(steps.size() == tensors_.size(), "one Adafactor step per tensor");
  const size_t base = plan_.opt_begin, off = plan_.offload_begin();
  for_tensors(base, off, [&](size_t t, size_t a, size_t b) {
    ops_.adafactor_apply(args, steps[t].scale, steps[t].decay, master_at(a),
                         has_exp_avg_ ? exp_avg_.data() + (a - base) : nullptr, adafactor_moment(factors, t, a),
                         buffers_.grad_at(a),
                         plan_.grad_dtype, buffers_.param_at(a), plan_.dtype, b - a);
  });
  if (!offload_) return;
  const auto* grads = static_cast<const unsigned char*>(offloaded_grads());
  OptimizerOps& cpu = host_optimizer_ops();
  send_params_by_tensor([&](size_t t, const OffloadPiece& p, size_t at, size_t a, size_t n, void* out) {
    cpu.adafactor_apply(args, steps[t].scale, steps[t].decay, p.master + at, p.exp_avg ? p.exp_avg + at : nullptr,
                        adafactor_moment(factors, t, a), grads + (a - off) * plan_.grad_elem(), plan_.grad_dtype, out,
                        plan_.dtype, n);
  });
}

void OptimizerPartition::onebit_apply(const OptimizerStepArgs& args, OneBitCompression* compression) {
  ZT_CHECK(!offload_ && plan_.optimizer_replicated(), "1-bit Adam steps at stage 0 only");
  const size_t base = plan_.opt_begin;
  for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
    ops_.onebit_apply(args, master_at(a), exp_avg_.data() + (a - base), exp_avg_sq_.data() + (a - base),
                      compression ? compression->gathered(t) : SignBlocks{}, buffers_.param_at(a), plan_.dtype, b - a);
  });
}

void OptimizerPartition::onebit_lamb_momentum(const OptimizerStepArgs& args, const std::vector<float>& scales,
                                              float* packed) {
  ZT_CHECK(!offload_ && plan_.optimizer_replicated(), "1-bit Lamb steps at stage 0 only");
  const size_t base = plan_.opt_begin;
  size_t at = 0;
  for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
    ops_.onebit_lamb_momentum(args, scales[t], exp_avg_.data() + (a - base), buffers_.grad_at(a), plan_.grad_dtype,
                              packed + at, b - a);
    at += b - a;
  });
}

std::vector<double> OptimizerPartition::onebit_lamb_stats(const OptimizerStepArgs& args,
                                                          const std::vector<float>& scales, const float* reduced) {
  ZT_CHECK(!offload_ && plan_.optimizer_replicated(), "1-bit Lamb steps at stage 0 only");
  const size_t base = plan_.opt_begin;
  backend_.zero_async(tensor_sums_.data(), tensor_sums_.bytes(), compute_);
  size_t at = 0;
  for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
    ops_.onebit_lamb_stats(args, scales[t], master_at(a), exp_avg_.data() + (a - base),
                           exp_avg_sq_.data() + (a - base), exp_avg_sq_fresh_.data() + (a - base), reduced + at, b - a,
                           tensor_sums_.data() + 3 * t);
    at += b - a;
  });
  std::vector<double> sums(3 * tensors_.size());
  backend_.copy_to_host(sums.data(), tensor_sums_.data(), sums.size() * sizeof(double));
  return sums;
}

std::vector<double> OptimizerPartition::exp_avg_sum_squares() {
  ZT_CHECK(!offload_ && plan_.optimizer_replicated(), "1-bit Lamb steps at stage 0 only");
  const size_t base = plan_.opt_begin;
  backend_.zero_async(tensor_sums_.data(), tensor_sums_.bytes(), compute_);
  for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
    ops_.sum_squares(exp_avg_.data() + (a - base), DType::kF32, b - a, tensor_sums_.data() + t);
  });
  std::vector<double> sums(tensors_.size());
  backend_.copy_to_host(sums.data(), tensor_sums_.data(), sums.size() * sizeof(double));
  return sums;
}

void OptimizerPartition::zero_one_pass(const ZeroOneArgs& z, const OptimizerStepArgs& args, float* accumulator,
                                       OneBitCompression* compression) {
  ZT_CHECK(!offload_ && plan_.optimizer_replicated(), "0/1 Adam steps at stage 0 only");
  const size_t base = plan_.opt_begin;
  for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
    ops_.zero_one_pass(z, args, master_at(a), exp_avg_.data() + (a - base), exp_avg_sq_.data() + (a - base),
                       accumulator + (a - base), buffers_.grad_at(a), plan_.grad_dtype,
                       compression ? compression->gathered(t) : SignBlocks{}, buffers_.param_at(a), plan_.dtype,
                       b - a);
  });
}

void OptimizerPartition::load_range(const float* master, const float* exp_avg) {
  ZT_CHECK(!offload_, "load_range: an offloaded optimizer");
  const size_t lo = plan_.opt_begin, n = plan_.device_count;
  backend_.copy_from_host(master_at(lo), master, n * sizeof(float));
  backend_.copy_from_host(exp_avg_.data(), exp_avg, n * sizeof(float));
  if (plan_.has_master()) backend_.cast_async(master_at(lo), DType::kF32, buffers_.param_at(lo), plan_.dtype, n, compute_);
}

std::vector<size_t> OptimizerPartition::aux_partition_counts() const {
  std::vector<size_t> counts;
  for (int r = 0; r < plan_.world; ++r) {
    counts.push_back(aux_elements(plan_.partition.begin(r), plan_.partition.end(r), tensors_, shapes_, opt_));
  }
  return counts;
}

void OptimizerPartition::read_field(StateField field, size_t lo, size_t n, float* out) {
  join_update();
  const size_t hi = lo + n, base = plan_.offload_begin();
  ZT_CHECK(lo >= plan_.opt_begin && hi <= plan_.opt_end(), "[", lo, ", ", hi, ") is outside this rank's range");
  ZT_CHECK(has(field), "the optimizer keeps no such state field");
  const size_t dev_hi = std::min(hi, base);
  if (field == StateField::kExpAvgSq && !aux_start_.empty() && dev_hi > lo) {  // packed: zeros elsewhere
    std::fill(out, out + (dev_hi - lo), 0.0f);
    for_tensors(lo, dev_hi, [&](size_t t, size_t a, size_t b) {
      if (keeps_sq(t)) {
        backend_.copy_to_host(out + (a - lo), aux_exp_avg_sq(t, a), (b - a) * sizeof(float));
      }
    });
  } else if (dev_hi > lo) {
    const size_t at = lo - plan_.opt_begin;
    const float* src = field == StateField::kMaster        ? master_at(lo)
                       : field == StateField::kExpAvg      ? exp_avg_.data() + at
                       : field == StateField::kExpAvgSqFresh ? exp_avg_sq_fresh_.data() + at
                                                           : exp_avg_sq_.data() + at;
    backend_.copy_to_host(out, src, (dev_hi - lo) * sizeof(float));
  }
  const size_t off_lo = std::max(lo, base);
  if (hi > off_lo && field == StateField::kExpAvgSq && opt_.factored()) {  // Adafactor's, packed on the host
    std::fill(out + (off_lo - lo), out + n, 0.0f);
    for_tensors(off_lo, hi, [&](size_t t, size_t a, size_t b) {
      if (keeps_sq(t)) std::memcpy(out + (a - lo), aux_exp_avg_sq(t, a), (b - a) * sizeof(float));
    });
  } else if (hi > off_lo) {
    ZT_CHECK(field != StateField::kExpAvgSqFresh, "OneBitLamb's state is never offloaded");
    offload_->visit(off_lo - base, hi - base, SwapMode::kRead, [&](const OffloadPiece& p) {
      const float* src = field == StateField::kMaster ? p.master : field == StateField::kExpAvg ? p.exp_avg : p.exp_avg_sq;
      std::memcpy(out + (base + p.lo - lo), src, p.n * sizeof(float));
    });
  }
}

void OptimizerPartition::load_to_device(StateField field, const FieldReader& read, size_t lo, size_t hi,
                                        float* device) {
  // The reader writes host memory; the device gets it piece by piece (16 MiB of host memory).
  constexpr size_t kPiece = size_t(4) << 20;
  std::vector<float> piece(std::min(kPiece, hi - lo));
  for (size_t a = lo; a < hi; a += kPiece) {
    const size_t b = std::min(hi, a + kPiece);
    read(field, a, b, piece.data());
    backend_.copy_from_host(device + (a - lo), piece.data(), (b - a) * sizeof(float));
  }
}

void OptimizerPartition::load(const FieldReader& read, bool moments) {
  // Everything is replaced, the parameters too: an update in flight is dropped once it ends.
  join_update();
  pending_ = false;
  sent_.clear();
  // This rank's partition of every field (at stage 0 the range is the whole model; the caller
  // all-gathers the rest), on the device part first.
  const size_t lo = plan_.partition.begin(plan_.rank), hi = std::min(plan_.partition.end(plan_.rank), plan_.offload_begin());
  if (!moments) zero_moments();  // the whole device range, not just the partition: nothing to all-gather
  if (hi > lo) {
    const size_t at = lo - plan_.opt_begin;
    if (moments && has(StateField::kExpAvg)) load_to_device(StateField::kExpAvg, read, lo, hi, exp_avg_.data() + at);
    if (moments && has(StateField::kExpAvgSq) && !aux_start_.empty()) {
      for_tensors(lo, hi, [&](size_t t, size_t a, size_t b) {
        if (keeps_sq(t)) load_to_device(StateField::kExpAvgSq, read, a, b, aux_exp_avg_sq(t, a));
      });
    } else if (moments && has(StateField::kExpAvgSq)) {
      load_to_device(StateField::kExpAvgSq, read, lo, hi, exp_avg_sq_.data() + at);
    }
    if (moments && has(StateField::kExpAvgSqFresh)) {
      load_to_device(StateField::kExpAvgSqFresh, read, lo, hi, exp_avg_sq_fresh_.data() + at);
    }
    load_to_device(StateField::kMaster, read, lo, hi, master_at(lo));
    if (plan_.has_master()) {
      backend_.cast_async(master_at(lo), DType::kF32, buffers_.param_at(lo), plan_.dtype, hi - lo, compute_);
    }
  }
  if (!offload_) return;
  // Straight into the offloaded state (through the swap buffers on NVMe), then the parameters.
  const size_t base = plan_.offload_begin();
  offload_->visit(0, offload_->size(), SwapMode::kWrite, [&](const OffloadPiece& p) {
    if (p.exp_avg) read(StateField::kExpAvg, base + p.lo, base + p.lo + p.n, p.exp_avg);
    if (p.exp_avg_sq) read(StateField::kExpAvgSq, base + p.lo, base + p.lo + p.n, p.exp_avg_sq);
    read(StateField::kMaster, base + p.lo, base + p.lo + p.n, p.master);
  });
  if (opt_.factored()) {
    for_tensors(base, plan_.opt_end(), [&](size_t t, size_t a, size_t b) {
      if (keeps_sq(t)) read(StateField::kExpAvgSq, a, b, aux_exp_avg_sq(t, a));  // zeros without moments
    });
  }
  offload_->copy_params_from_master(param_sink());
  backend_.wait(compute_, offload_->params_written());
}

OptimizerPartition::Bytes OptimizerPartition::bytes() const {
  Bytes b;
  b.device.master = master_.bytes();
  b.device.exp_avg = exp_avg_.bytes();
  b.device.exp_avg_sq = exp_avg_sq_.bytes() + exp_avg_sq_fresh_.bytes();
  b.host_pool = offload_ ? offload_->host_pool() : Pool::kHost;
  if (!offload_) return b;
  // In host memory, or in the swap file (whose size is the fields, padded per piece).
  const size_t field = (offload_->host_state_bytes() + offload_->nvme_bytes()) / offload_->fields();
  b.offloaded.master = field;
  b.offloaded.exp_avg = has(StateField::kExpAvg) ? field : 0;
  b.offloaded.exp_avg_sq = has(StateField::kExpAvgSq) ? (opt_.factored() ? host_aux_sq_.bytes() : field) : 0;
  b.offloaded.grads = host_grads_.bytes();
  b.host = offload_->host_state_bytes() + host_grads_.bytes() + host_aux_sq_.bytes();
  b.nvme = offload_->nvme_bytes();
  b.buffers = offload_->buffer_bytes() + pending_params_.bytes() + host_updates_.bytes();
  return b;
}

}  // namespace zt
