#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/caching_allocator_rules.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "core/human_units.h"
#include "core/memory_pool.h"

namespace zt::cuda {

namespace {

struct DeviceProbe {
  int count = 0;
  std::string reason;
};

// cudaGetDeviceCount, once per process: without a driver it fails (cudaErrorInsufficientDriver or
// cudaErrorNoDevice), which is an answer here, not an error.
const DeviceProbe& probe() {
  static const DeviceProbe p = [] {
    DeviceProbe r;
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      r.reason = cat("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
      cudaGetLastError();  // not sticky: clear it
    } else if (r.count == 0) {
      r.reason = "the CUDA driver sees no GPU";
    }
    return r;
  }();
  return p;
}

class CudaBackend;

// A stream the backend tracks, so that a free can fence every stream that may still use a block.
class CudaStream final : public Stream {
 public:
  CudaStream(CudaBackend& backend, std::string name);
  ~CudaStream() override;
  const std::string& name() const override { return name_; }
  cudaStream_t handle() const { return handle_; }

  // A host function's exception fails the stream (sticky, as CUDA errors are); later host
  // functions on it do not run, and the next synchronize on it rethrows.
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = e;
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return error_ != nullptr;
  }
  void rethrow() {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  CudaBackend& backend_;
  std::string name_;
  cudaStream_t handle_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

class CudaEvent final : public Event {
 public:
  // Without timing an event is cheaper to record and to wait on; a timing event (the self-profile's)
  // keeps when the stream reached it.
  explicit CudaEvent(bool timing = false) {
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() override { cudaEventDestroy(handle_); }
  cudaEvent_t handle() const { return handle_; }
  CudaStream* stream = nullptr;  // where it was last recorded: its failures are this event's

 private:
  cudaEvent_t handle_ = nullptr;
};

// A recorded event as the allocator's fence.
class EventFence final : public Fence {
 public:
  explicit EventFence(cudaStream_t stream) {
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    ZT_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~EventFence() override { cudaEventDestroy(event_); }
  bool done() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    ZT_CUDA_CHECK(e, "(a stream failed before a freed block's last use)");
    return true;
  }
  void wait() override { ZT_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaHeap final : public DeviceHeap {
 public:
  void* reserve(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // out of memory is not sticky: the allocator retries after freeing
      return nullptr;
    }
    ZT_CUDA_CHECK(e, "reserving ", bytes, " bytes");
    return p;
  }
  void release(void* segment) override { ZT_CUDA_CHECK(cudaFree(segment)); }
};

// The argument of a host function: the callable and the stream it fails.
struct HostFunc {
  std::function<void()> fn;
  CudaStream* stream;
};

void run_host_func(void* arg) {
  std::unique_ptr<HostFunc> f(static_cast<HostFunc*>(arg));
  if (f->stream->failed()) return;
  try {
    f->fn();
  } catch (...) {
    f->stream->fail(std::current_exception());
  }
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    ZT_CUDA_CHECK(cudaSetDevice(device), "binding GPU ", device);
    ZT_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
    allocator_ = std::make_unique<CachingAllocator>(heap_);
    compute_ = std::make_unique<CudaStream>(*this, "compute");
    ctx_.device = device;
    ctx_.sm_count = props_.multiProcessorCount;
    ctx_.compute = compute_->handle();
    ZT_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    ctx_.lt_workspace_bytes = kCublasLtWorkspaceBytes;
    ctx_.lt_workspace = allocate(Pool::kDevice, ctx_.lt_workspace_bytes);
    ctx_.scratch = [this](size_t bytes) { return scratch(bytes); };
    kernels_ = make_cuda_kernels(ctx_);
    kernels_bf16_ = make_cuda_kernels_bf16(ctx_);
    optimizer_ = make_cuda_optimizer_ops(ctx_);
  }

  ~CudaBackend() override {
    cudaDeviceSynchronize();
    kernels_.reset();
    kernels_bf16_.reset();
    optimizer_.reset();
    if (scratch_) deallocate(Pool::kDevice, scratch_, scratch_bytes_);
    deallocate(Pool::kDevice, ctx_.lt_workspace, ctx_.lt_workspace_bytes);
    cublasLtDestroy(ctx_.lt);
    compute_.reset();
    allocator_.reset();
  }

  std::string name() const override { return "cuda"; }
  bool native_bf16_gemm() const override { return true; }
  std::string describe() const override {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    return cat(props_.name, " (GPU ", device_, ", sm_", props_.major, props_.minor, ", ", props_.multiProcessorCount,
               " SMs, ", human_bytes(double(props_.totalGlobalMem)), "; CUDA runtime ", runtime / 1000, ".",
               runtime % 1000 / 10, ", driver ", driver / 1000, ".", driver % 1000 / 10, ", cuBLASLt ",
               cublasLtGetVersion(), ")");
  }
  bool synchronous() const override { return false; }
  bool device_is_host_memory() const override { return false; }
  size_t available_device_memory() const override {
    ZT_CUDA_CHECK(cudaSetDevice(device_));  // the current device is per host thread
    size_t free = 0, total = 0;
    ZT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
  bool kernels_reach_host_memory() const override { return false; }

  // ---- memory ----
  void* allocate(Pool pool, size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    switch (pool) {
      case Pool::kDevice:
        // The current device is per host thread; cudaMalloc must land on this backend's GPU.
        ZT_CUDA_CHECK(cudaSetDevice(device_));
        p = allocator_->allocate(bytes);
        break;
      case Pool::kPinned: {
        const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        if (e == cudaErrorMemoryAllocation) {
          cudaGetLastError();
          throw OutOfMemory(cat("cannot pin ", human_bytes(double(bytes)), " of host memory (cudaHostAlloc)"));
        }
        ZT_CUDA_CHECK(e, "pinning ", bytes, " bytes");
        break;
      }
      default:
        return pool_alloc(pool, bytes);  // host memory, charged by pool_alloc
    }
    pool_counter(pool).add(bytes);
    return p;
  }

  void deallocate(Pool pool, void* ptr, size_t bytes) override {
    if (!ptr) return;
    switch (pool) {
      case Pool::kDevice:
        allocator_->free(ptr, fences_now());
        break;
      case Pool::kPinned:
        // cudaFreeHost waits for the device; work still using the memory has finished after it.
        ZT_CUDA_CHECK(cudaFreeHost(ptr));
        break;
      default:
        pool_free(pool, ptr, bytes);
        return;
    }
    pool_counter(pool).sub(bytes);
  }

  // ---- streams and events ----
  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    return std::make_unique<CudaStream>(*this, name);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }
  void record(Event& event, Stream& stream) override {
    auto& e = as_event(event);
    e.stream = &as_stream(stream);
    ZT_CUDA_CHECK(cudaEventRecord(e.handle(), e.stream->handle()));
  }
  void wait(Stream& stream, Event& event) override {
    ZT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream).handle(), as_event(event).handle(), 0));
  }
  void synchronize(Event& event) override {
    auto& e = as_event(event);
    ZT_CUDA_CHECK(cudaEventSynchronize(e.handle()));
    if (e.stream) e.stream->rethrow();
  }
  void synchronize(Stream& stream) override {
    auto& s = as_stream(stream);
    ZT_CUDA_CHECK(cudaStreamSynchronize(s.handle()), "(stream '", s.name(), "')");
    s.rethrow();
  }
  void synchronize() override {
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (CudaStream* s : streams_) s->rethrow();
  }
  std::unique_ptr<Event> create_timing_event() override { return std::make_unique<CudaEvent>(true); }
  double elapsed_ms(Event& start, Event& end) override {
    synchronize(start);  // cudaEventElapsedTime fails on an event that has not completed
    synchronize(end);
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start).handle(), as_event(end).handle()));
    return ms;
  }

  // ---- data movement ----
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream).handle()));
  }

  void cast_async(const void* src, DType st, void* dst, DType dt, size_t n, Stream& stream) override {
    if (n == 0 || (src == dst && st == dt)) return;
    CudaStream& s = as_stream(stream);
    const bool src_host = !device_accessible(src), dst_host = !device_accessible(dst);
    if (src_host && dst_host) {
      // Pageable host memory on both sides: convert on the host, in the stream's order.
      launch_host_func(stream, [=] { convert(src, st, dst, dt, n); });
      return;
    }
    if (!src_host && !dst_host) {
      launch_cast(src, st, dst, dt, n, s.handle());
      return;
    }
    // One side is pageable host memory, which a kernel cannot address: bounce through the device.
    const size_t bounce_bytes = n * dtype_size(src_host ? st : dt);
    void* bounce = allocate(Pool::kDevice, bounce_bytes);
    if (src_host) {
      copy_async(bounce, src, bounce_bytes, stream);
      launch_cast(bounce, st, dst, dt, n, s.handle());
    } else {
      launch_cast(src, st, bounce, dt, n, s.handle());
      copy_async(dst, bounce, bounce_bytes, stream);
    }
    deallocate(Pool::kDevice, bounce, bounce_bytes);  // fenced: reused only after this stream's copy
  }

  void zero_async(void* dst, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    if (!device_accessible(dst)) {
      launch_host_func(stream, [=] { std::memset(dst, 0, bytes); });
      return;
    }
    ZT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, as_stream(stream).handle()));
  }

  void launch_host_func(Stream& stream, std::function<void()> fn) override {
    CudaStream& s = as_stream(stream);
    auto* arg = new HostFunc{std::move(fn), &s};
    const cudaError_t e = cudaLaunchHostFunc(s.handle(), run_host_func, arg);
    if (e != cudaSuccess) delete arg;
    ZT_CUDA_CHECK(e, "(stream '", s.name(), "')");
  }

  // ---- kernels ----
  KernelOps<float>& ops() override { return *kernels_; }
  KernelOps<bf16>& ops_bf16() override { return *kernels_bf16_; }
  KernelOps<double>* ops_f64() override { return nullptr; }
  OptimizerOps& optimizer_ops() override { return *optimizer_; }

  // ---- for CudaStream, backend_context ----
  void add_stream(CudaStream* s) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    streams_.push_back(s);
  }
  void remove_stream(CudaStream* s) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
  }
  CudaContext& context() { return ctx_; }
  int device() const { return device_; }

 private:
  static CudaStream& as_stream(Stream& s) {
    auto* c = dynamic_cast<CudaStream*>(&s);
    ZT_CHECK(c, "stream '", s.name(), "' was not made by the CUDA backend");
    return *c;
  }
  static CudaEvent& as_event(Event& e) {
    auto* c = dynamic_cast<CudaEvent*>(&e);
    ZT_CHECK(c, "an event not made by the CUDA backend");
    return *c;
  }

  // Device memory, pinned (mapped) host memory and managed memory: what a kernel can address.
  static bool device_accessible(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.type != cudaMemoryTypeUnregistered;
  }

  // One fence per live stream: a freed block is reused only after every stream's earlier work.
  std::vector<std::shared_ptr<Fence>> fences_now() {
    ZT_CUDA_CHECK(cudaSetDevice(device_));  // events belong to the current device: this one
    std::lock_guard<std::mutex> lock(streams_mutex_);
    std::vector<std::shared_ptr<Fence>> fences;
    fences.reserve(streams_.size());
    for (CudaStream* s : streams_) fences.push_back(std::make_shared<EventFence>(s->handle()));
    return fences;
  }

  void* scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_) deallocate(Pool::kDevice, scratch_, scratch_bytes_);
      // Exactly the largest request so far, which the memory estimate bounds (zero/
      // memory_estimate.cpp); the requests are the same every step, so it grows in the first.
      scratch_bytes_ = bytes;
      scratch_ = allocate(Pool::kDevice, scratch_bytes_);
    }
    return scratch_;
  }

  const int device_;
  cudaDeviceProp props_{};
  CudaHeap heap_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::mutex streams_mutex_;
  std::vector<CudaStream*> streams_;
  std::unique_ptr<CudaStream> compute_;
  CudaContext ctx_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::unique_ptr<KernelOps<float>> kernels_;
  std::unique_ptr<KernelOps<bf16>> kernels_bf16_;
  std::unique_ptr<OptimizerOps> optimizer_;
};

CudaStream::CudaStream(CudaBackend& backend, std::string name) : backend_(backend), name_(std::move(name)) {
  ZT_CUDA_CHECK(cudaSetDevice(backend.device()));
  // Non-blocking: the legacy default stream must not serialise our streams with each other.
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking), "(stream '", name_, "')");
  backend_.add_stream(this);
}

CudaStream::~CudaStream() {
  backend_.remove_stream(this);
  cudaStreamSynchronize(handle_);
  cudaStreamDestroy(handle_);
}

CudaBackend& as_cuda(Backend& backend) {
  auto* c = dynamic_cast<CudaBackend*>(&backend);
  ZT_CHECK(c, "the ", backend.name(), " backend is not the CUDA backend");
  return *c;
}

}  // namespace

int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

cudaStream_t native_stream(Stream& stream) {
  auto* c = dynamic_cast<CudaStream*>(&stream);
  ZT_CHECK(c, "stream '", stream.name(), "' was not made by the CUDA backend");
  return c->handle();
}

int backend_device(Backend& backend) { return as_cuda(backend).device(); }
CudaContext& backend_context(Backend& backend) { return as_cuda(backend).context(); }

std::string pci_bus_id(int device) {
  char id[32] = {};
  ZT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, device));
  return id;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int n = device_count();
  if (n == 0) throw UsageError(cat("no usable GPU: ", unavailable_reason()));
  ZT_CHECK(device >= 0 && device < n, "GPU ", device, " does not exist (", n, " visible)");
  return std::make_unique<CudaBackend>(device);
}

}  // namespace zt::cuda
