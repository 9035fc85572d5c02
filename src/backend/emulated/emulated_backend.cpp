#include "backend/emulated/emulated_backend.h"

#include <omp.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "backend/emulated/access_checker.h"
#include "backend/emulated/device_memory.h"
#include "core/error.h"

namespace zt {
namespace emulated {
namespace {

// One stream: a queue of tasks run in order by its own thread.
class EmuStream final : public Stream {
 public:
  struct Task {
    std::function<void()> run;                 // null for a wait
    std::vector<const Allocation*> open;        // device allocations to open around `run`
    EmuStream* wait_for = nullptr;              // a wait: until wait_for has run wait_seq tasks
    uint64_t wait_seq = 0;
  };

  EmuStream(int id, std::string name, DeviceMemory& memory, int delay_us)
      : id(id), name_(std::move(name)), memory_(memory), delay_us_(delay_us), rng_(uint64_t(id) * 7919 + 1) {
    thread_ = std::thread([this] { loop(); });
  }
  ~EmuStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& name() const override { return name_; }

  /// Appends a task; returns how many tasks the stream has been given so far.
  uint64_t push(Task task) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    cv_.notify_all();
    return ++enqueued_;
  }
  uint64_t enqueued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  /// Blocks until `seq` tasks have run; returns the stream's first failure, if any.
  std::exception_ptr wait_until(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return executed_ >= seq; });
    return error_;
  }

  const int id;
  VectorClock clock;  // guarded by the backend's mutex

 private:
  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      if (task.wait_for) {
        error = task.wait_for->wait_until(task.wait_seq);
        if (error) error = std::make_exception_ptr(Error(cat("stream '", name_, "' waited on failed stream '",
                                                              task.wait_for->name(), "'")));
      } else if (!failed()) {
        if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % uint64_t(delay_us_)));
        try {
          for (const Allocation* a : task.open) memory_.open(*a);
          set_in_backend_operation(true);
          task.run();
        } catch (...) {
          error = std::current_exception();
        }
        set_in_backend_operation(false);
        for (const Allocation* a : task.open) memory_.close(*a);
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error && !error_) error_ = error;
        ++executed_;
      }
      cv_.notify_all();
    }
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_ != nullptr;
  }

  std::string name_;
  DeviceMemory& memory_;
  const int delay_us_;
  std::mt19937_64 rng_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0, executed_ = 0;
  std::exception_ptr error_;  // sticky, as a CUDA error is
  bool stopping_ = false;
  std::thread thread_;
};

class EmuEvent final : public Event {
 public:
  EmuStream* stream = nullptr;  // null: never recorded (complete, as in CUDA)
  uint64_t seq = 0;
  VectorClock clock;
  // A timing event's: the time its stream reached it, written there by a task that record queues.
  std::shared_ptr<std::chrono::steady_clock::time_point> reached;
};

int delay_from_env() {
  const char* v = std::getenv("ZT_EMULATED_DELAY_US");
  return v ? std::max(0, std::atoi(v)) : 0;
}

class EmulatedBackend final : public Backend, public ComputeQueue {
 public:
  EmulatedBackend() : cpu_(make_cpu_backend()), delay_us_(delay_from_env()) {
    compute_ = new_stream("compute");
    kernels_ = make_queued_kernels(*this, cpu_->ops());
    kernels_bf16_ = make_queued_kernels(*this, cpu_->ops_bf16());
    optimizer_ = make_queued_optimizer_ops(*this, cpu_->optimizer_ops());
  }
  ~EmulatedBackend() override {
    // Let queued work finish before the memory and the threads go (errors were reported already
    // or are moot now).
    for (EmuStream* s : streams_) s->wait_until(s->enqueued());
  }

  std::string name() const override { return "emulated"; }
  std::string describe() const override {
    return cat("emulated device (", cpu_->describe(), "; protected device memory, one thread per stream",
               delay_us_ > 0 ? cat(", operations delayed up to ", delay_us_, " us") : std::string(), ")");
  }
  bool synchronous() const override { return false; }
  // Its kernels are the CPU's, bf16 GEMMs included (and zero_estimate sizes a non-CUDA run so).
  bool native_bf16_gemm() const override { return cpu_->native_bf16_gemm(); }

  void* allocate(Pool pool, size_t bytes) override { return memory_.allocate(pool, bytes); }
  void deallocate(Pool pool, void* ptr, size_t bytes) override {
    if (!ptr) return;
    // As cudaFree: whatever still uses the memory finishes first.
    for (EmuStream* s : streams_) s->wait_until(s->enqueued());
    if (const Allocation* a = memory_.find(ptr)) {
      std::lock_guard<std::mutex> lock(mutex_);
      checker_.forget(a->id);
    }
    memory_.deallocate(pool, ptr, bytes);
  }

  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    // Streams live as long as the backend (their threads and clocks are in its tables); the
    // handle the caller gets forwards to it.
    return std::make_unique<StreamHandle>(*new_stream(name));
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<EmuEvent>(); }

  void record(Event& event, Stream& stream) override {
    EmuStream& s = resolve(stream);
    auto& e = static_cast<EmuEvent&>(event);
    if (e.reached) {
      enqueue(s, "timing event", {}, [reached = e.reached] { *reached = std::chrono::steady_clock::now(); });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    merge(s.clock, host_clock_);
    e.stream = &s;
    e.seq = s.enqueued();
    e.clock = s.clock;
  }
  void wait(Stream& stream, Event& event) override {
    EmuStream& s = resolve(stream);
    auto& e = static_cast<EmuEvent&>(event);
    if (!e.stream || e.stream == &s) return;  // same stream: in order already
    {
      std::lock_guard<std::mutex> lock(mutex_);
      merge(s.clock, e.clock);
    }
    EmuStream::Task task;
    task.wait_for = e.stream;
    task.wait_seq = e.seq;
    s.push(std::move(task));
  }
  void synchronize(Event& event) override {
    auto& e = static_cast<EmuEvent&>(event);
    if (!e.stream) return;
    rethrow(e.stream->wait_until(e.seq));
    std::lock_guard<std::mutex> lock(mutex_);
    merge(host_clock_, e.clock);
  }
  void synchronize(Stream& stream) override {
    EmuStream& s = resolve(stream);
    rethrow(s.wait_until(s.enqueued()));
    std::lock_guard<std::mutex> lock(mutex_);
    merge(host_clock_, s.clock);
  }
  void synchronize() override {
    for (EmuStream* s : streams_) synchronize(*s);
  }
  std::unique_ptr<Event> create_timing_event() override {
    auto e = std::make_unique<EmuEvent>();
    e->reached = std::make_shared<std::chrono::steady_clock::time_point>();
    return e;
  }
  double elapsed_ms(Event& start, Event& end) override {
    auto &s = static_cast<EmuEvent&>(start), &e = static_cast<EmuEvent&>(end);
    ZT_CHECK(s.reached && e.reached && s.stream && e.stream, "elapsed_ms needs two recorded timing events");
    synchronize(start);
    synchronize(end);
    return std::chrono::duration<double, std::milli>(*e.reached - *s.reached).count();
  }

  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    enqueue(resolve(stream), "copy_async", {{src, bytes, false}, {dst, bytes, true}},
            [=] { std::memmove(dst, src, bytes); });
  }
  void cast_async(const void* src, DType st, void* dst, DType dt, size_t n, Stream& stream) override {
    if (n == 0) return;
    enqueue(resolve(stream), "cast_async", {{src, n * dtype_size(st), false}, {dst, n * dtype_size(dt), true}},
            [=] {
              if (src != dst || st != dt) convert(src, st, dst, dt, n);
            });
  }
  void zero_async(void* dst, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    enqueue(resolve(stream), "zero_async", {{dst, bytes, true}}, [=] { std::memset(dst, 0, bytes); });
  }
  void launch_host_func(Stream& stream, std::function<void()> fn) override {
    enqueue(resolve(stream), "host function", {}, std::move(fn));
  }

  KernelOps<float>& ops() override { return *kernels_; }
  KernelOps<bf16>& ops_bf16() override { return *kernels_bf16_; }
  KernelOps<double>* ops_f64() override { return nullptr; }
  OptimizerOps& optimizer_ops() override { return *optimizer_; }

  void enqueue_compute(const char* op, std::vector<Access> accesses, std::function<void()> fn) override {
    enqueue(*compute_, op, std::move(accesses), std::move(fn));
  }

 private:
  // What create_stream hands out: the stream itself stays in the backend's table.
  class StreamHandle final : public Stream {
   public:
    explicit StreamHandle(EmuStream& s) : stream(s) {}
    const std::string& name() const override { return stream.name(); }
    EmuStream& stream;
  };

  EmuStream* new_stream(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    owned_.push_back(std::make_unique<EmuStream>(int(owned_.size()), name, memory_, delay_us_));
    streams_.push_back(owned_.back().get());
    names_.push_back(name);
    return streams_.back();
  }
  EmuStream& resolve(Stream& stream) {
    if (auto* h = dynamic_cast<StreamHandle*>(&stream)) return h->stream;
    return static_cast<EmuStream&>(stream);
  }
  static void rethrow(const std::exception_ptr& error) {
    if (error) std::rethrow_exception(error);
  }

  // Ticks the stream's clock, checks and records the accesses, and queues the work.
  void enqueue(EmuStream& s, const char* op, const std::vector<Access>& accesses, std::function<void()> fn) {
    EmuStream::Task task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      merge(s.clock, host_clock_);
      if (s.clock.size() <= size_t(s.id)) s.clock.resize(size_t(s.id) + 1, 0);
      ++s.clock[size_t(s.id)];
      for (const Access& access : accesses) {
        const Allocation* a = memory_.find(access.ptr);
        if (!a) continue;  // host memory the backend did not allocate: the caller keeps it alive
        const uintptr_t lo = reinterpret_cast<uintptr_t>(access.ptr), end = a->begin + a->bytes;
        const uintptr_t hi = access.bytes == kToEnd ? end : lo + access.bytes;
        ZT_CHECK(hi <= end, "emulated backend: ", op, " ", access.write ? "writes" : "reads", " bytes [",
                 lo - a->begin, ", ", hi - a->begin, ") of a ", pool_name(a->pool), " buffer of ", a->bytes, " bytes");
        checker_.access(a->id, a->begin, cat("a ", pool_name(a->pool), " buffer of ", a->bytes, " bytes (#", a->id, ")"),
                        {lo, hi, access.write}, s.id, s.clock, op, names_);
        if (a->pool == Pool::kDevice &&
            std::find(task.open.begin(), task.open.end(), a) == task.open.end()) {
          task.open.push_back(a);
        }
      }
    }
    task.run = std::move(fn);
    s.push(std::move(task));
  }

  std::unique_ptr<Backend> cpu_;  // its kernels do the arithmetic
  const int delay_us_;
  DeviceMemory memory_;
  std::mutex mutex_;  // clocks, the checker, the stream table
  AccessChecker checker_;
  VectorClock host_clock_;
  std::vector<std::unique_ptr<EmuStream>> owned_;
  std::vector<EmuStream*> streams_;
  std::vector<std::string> names_;
  EmuStream* compute_ = nullptr;
  std::unique_ptr<KernelOps<float>> kernels_;
  std::unique_ptr<KernelOps<bf16>> kernels_bf16_;
  std::unique_ptr<OptimizerOps> optimizer_;
};

}  // namespace
}  // namespace emulated

std::unique_ptr<Backend> make_emulated_backend() { return std::make_unique<emulated::EmulatedBackend>(); }

}  // namespace zt
