#include "train/step_profile.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "comm/data_comm.h"
#include "core/log.h"
#include "train/metrics.h"

namespace zt {

namespace {

// A collective in flight whose waits are bracketed as communication on the compute stream.
class ProfiledWork final : public DataWork {
 public:
  ProfiledWork(std::shared_ptr<DataWork> inner, OpTimeline& timeline, Stream& compute)
      : inner_(std::move(inner)), timeline_(timeline), compute_(compute) {}

  // Another stream's wait (a copy stream's) does not hold the compute stream up.
  void wait(Stream& stream) override {
    if (&stream != &compute_) return inner_->wait(stream);
    bracketed([&] { inner_->wait(stream); });
  }
  // The host blocks: the compute stream idles once it has run what was enqueued before.
  void synchronize() override {
    bracketed([&] { inner_->synchronize(); });
  }

 private:
  template <typename Wait>
  void bracketed(Wait&& wait) {
    if (!timeline_.active()) return wait();
    timeline_.begin(OpClass::kCommunication);
    wait();
    timeline_.end();
  }

  std::shared_ptr<DataWork> inner_;
  OpTimeline& timeline_;
  Stream& compute_;
};

// `inner` with its collectives' waits bracketed; the rest forwarded. Only the engine is built
// over it: the trainer reads the step's byte counts (stats) from `inner` itself.
class ProfiledDataComm final : public DataComm {
 public:
  ProfiledDataComm(DataComm& inner, OpTimeline& timeline, Stream& compute)
      : inner_(inner), timeline_(timeline), compute_(compute) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  size_t max_collective_elements() const override { return inner_.max_collective_elements(); }
  std::vector<int> node_of_ranks() const override { return inner_.node_of_ranks(); }
  std::shared_ptr<DataWork> all_reduce(void* buffer, size_t count, DType dtype, Stream& after) override {
    return wrap(inner_.all_reduce(buffer, count, dtype, after));
  }
  std::shared_ptr<DataWork> reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                                           DType dtype, Stream& after) override {
    return wrap(inner_.reduce_scatter(send, recv, recv_counts, dtype, after));
  }
  std::shared_ptr<DataWork> all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                       Stream& after) override {
    return wrap(inner_.all_gather(send, recv, counts, dtype, after));
  }
  std::shared_ptr<DataWork> broadcast(void* buffer, size_t count, DType dtype, int root, Stream& after) override {
    return wrap(inner_.broadcast(buffer, count, dtype, root, after));
  }
  std::shared_ptr<DataWork> all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream& after) override {
    return wrap(inner_.all_to_all(send, recv, count, dtype, after));
  }
  std::shared_ptr<DataWork> all_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                         const std::vector<size_t>& recv_counts, DType dtype, Stream& after) override {
    return wrap(inner_.all_to_all_v(send, send_counts, recv, recv_counts, dtype, after));
  }
  std::unique_ptr<SharedBuffer> allocate_shared(size_t bytes) override { return inner_.allocate_shared(bytes); }

 protected:
  // The inner communicator's group, counted in its stats (the trainer's); its waits are not
  // bracketed (ZeRO++'s and MiCS's group collectives show in the profile as compute).
  std::unique_ptr<DataComm> make_group(int color) override { return inner_.split(color); }

 private:
  std::shared_ptr<DataWork> wrap(std::shared_ptr<DataWork> work) {
    return std::make_shared<ProfiledWork>(std::move(work), timeline_, compute_);
  }

  DataComm& inner_;
  OpTimeline& timeline_;
  Stream& compute_;
};

// What the times were taken with, for the table's title.
std::string timer_of(const Backend& backend) {
  if (backend.name() == "cuda") return "CUDA events";
  if (backend.name() == "emulated") return "the emulated streams' clock";
  return "the host's clock (the CPU backend runs an op as it is called)";
}

// Calls per step: a whole number when every profiled step made the same calls.
boost::json::value calls_json(int64_t total, int64_t steps) {
  if (total % steps == 0) return total / steps;
  return double(total) / double(steps);
}

std::string calls_text(int64_t total, int64_t steps) {
  char text[32];
  std::snprintf(text, sizeof(text), total % steps == 0 ? "%.0f" : "%.1f", double(total) / double(steps));
  return text;
}

std::string table_row(const char* name, const std::string& calls, double ms, double wall, double max_ms) {
  char row[128];
  std::snprintf(row, sizeof(row), "  %-14s %10s %11.3f %9.1f %14.3f", name, calls.c_str(), ms,
                wall > 0 ? 100.0 * ms / wall : 0.0, max_ms);
  return row;
}

}  // namespace

StepProfiler::StepProfiler(Backend& backend, DataComm& data_comm, int64_t steps)
    : backend_(backend), data_comm_(data_comm), steps_(steps) {
  if (steps_ <= 0) return;
  timeline_ = std::make_unique<OpTimeline>(backend);
  kernels_f32_ = make_profiled_kernels(backend.ops(), *timeline_);
  kernels_bf16_ = make_profiled_kernels(backend.ops_bf16(), *timeline_);
  profiled_comm_ = std::make_unique<ProfiledDataComm>(data_comm, *timeline_, backend.compute_stream());
}

StepProfiler::~StepProfiler() = default;

DataComm& StepProfiler::data_comm() { return profiled_comm_ ? *profiled_comm_ : data_comm_; }

void StepProfiler::begin_step(int64_t step) {
  if (!timeline_) return;
  ++started_;
  if (started_ == 1 || profiled_ >= steps_) return;  // the run's first step warms up
  if (profiled_ == 0) first_step_ = step;
  last_step_ = step;
  timeline_->begin_step();
}

void StepProfiler::end_step() {
  if (!timeline_ || !timeline_->active()) return;
  const StepTimes t = timeline_->end_step();
  for (size_t c = 0; c < size_t(kNumOpClasses); ++c) {
    total_.ms[c] += t.ms[c];
    total_.calls[c] += t.calls[c];
  }
  total_.wall_ms += t.wall_ms;
  ++profiled_;
}

void StepProfiler::begin_optimizer() {
  if (!timeline_ || !timeline_->active()) return;
  optimizer_start_ = std::chrono::steady_clock::now();
  timeline_->begin(OpClass::kOptimizer);
}

void StepProfiler::end_optimizer() {
  if (!timeline_ || !timeline_->active()) return;
  timeline_->end();
  engine_step_host_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - optimizer_start_).count();
}

void StepProfiler::report_if_done(int64_t step, int64_t last_step, HostComm& comm, MetricsWriter& metrics) {
  if (!timeline_ || reported_ || (profiled_ < steps_ && step < last_step)) return;
  reported_ = true;
  if (profiled_ == 0) {
    log_info("profile: no step profiled (--profile_steps): the run's first step warms up, and it had no other");
    return;
  }
  // Per step, this rank's: the classes, host gaps (the wall time outside them), the wall time.
  const double n = double(profiled_);
  constexpr size_t kGaps = kNumOpClasses, kWall = kNumOpClasses + 1;
  std::vector<double> mine(kNumOpClasses + 2, 0.0);
  double classes = 0;
  for (size_t c = 0; c < size_t(kNumOpClasses); ++c) classes += mine[c] = total_.ms[c] / n;
  mine[kWall] = total_.wall_ms / n;
  mine[kGaps] = mine[kWall] - classes;
  std::vector<double> max = mine;
  comm.all_reduce_doubles(max, true);

  // Rank 0 prints its own figures (they add up to its step), with the max over ranks beside.
  const double wall = mine[kWall];
  log_info("profile: steps ", first_step_, "-", last_step_, " (", profiled_, " step(s); step ", first_step_ - 1,
           " warmed up), rank 0's time per step by ", timer_of(backend_), "; last column: the max over ",
           comm.size(), " rank(s)");
  char header[128];
  std::snprintf(header, sizeof(header), "  %-14s %10s %11s %9s %14s", "class", "calls/step", "ms/step", "% step",
                "max ms/step");
  log_info(header);
  boost::json::object json_classes;
  for (size_t c = 0; c < size_t(kNumOpClasses); ++c) {
    const char* name = op_class_name(OpClass(c));
    log_info(table_row(name, calls_text(total_.calls[c], profiled_), mine[c], wall, max[c]));
    json_classes[name] = {{"calls", calls_json(total_.calls[c], profiled_)},
                          {"ms", mine[c]},
                          {"percent", wall > 0 ? 100.0 * mine[c] / wall : 0.0},
                          {"ms_max", max[c]}};
  }
  log_info(table_row("host gaps", "-", mine[kGaps], wall, max[kGaps]));
  log_info(table_row("step (wall)", "-", wall, wall, max[kWall]));
  json_classes["host_gaps"] = {
      {"ms", mine[kGaps]}, {"percent", wall > 0 ? 100.0 * mine[kGaps] / wall : 0.0}, {"ms_max", max[kGaps]}};
  char engine_ms[32];
  std::snprintf(engine_ms, sizeof(engine_ms), "%.3f", engine_step_host_ms_ / n);
  log_info("profile: the engine's step took ", engine_ms, " ms/step on the host; optimizer is its time on the ",
           "compute stream less its waits for collectives (communication); host gaps: the wall time outside every ",
           "class (zerotrain --help)");
  metrics.write("profile", {{"first_step", first_step_},
                            {"last_step", last_step_},
                            {"steps", profiled_},
                            {"backend", backend_.name()},
                            {"step_ms", wall},
                            {"step_ms_max", max[kWall]},
                            {"engine_step_host_ms", engine_step_host_ms_ / n},
                            {"classes", std::move(json_classes)}});
}

}  // namespace zt
