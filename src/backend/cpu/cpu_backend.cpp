// The CPU backend: host memory stands in for every pool, kernels run on the calling thread's
// OpenMP team, and "asynchronous" copies are synchronous.
#include <omp.h>

#include <chrono>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/cpu_features.h"
#include "core/error.h"

namespace zt {

namespace {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
};

// A timing event notes when it was recorded: the stream reached it then, everything before it
// having run.
class CpuEvent final : public Event {
 public:
  explicit CpuEvent(bool timing = false) : timing(timing) {}
  const bool timing;
  std::chrono::steady_clock::time_point reached{};
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() : isa_(active_cpu_isa()) {
    if (isa_ == CpuIsa::kAvx512) {
      kernels_ = cpu::make_kernels_f32_avx512();
      optimizer_ = cpu::make_optimizer_kernels_avx512();
    } else {
      kernels_ = cpu::make_kernels_f32_avx2();
      optimizer_ = cpu::make_optimizer_kernels_avx2();
    }
    kernels_f64_ = cpu::make_kernels_f64();
    kernels_bf16_ = cpu::make_bf16_kernels(isa_ == CpuIsa::kAvx512 ? cpu::make_kernels_f32_avx512()
                                                                   : cpu::make_kernels_f32_avx2());
  }

  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    const std::string& core = cpu::openblas_core_note();
    return cat("cpu (", cpu_isa_name(isa_), ", ", omp_get_max_threads(), " OpenMP threads, ",
               openblas_get_config(), core.empty() ? "" : "; ", core, "; ", cpu::bf16_gemm_description(), ")");
  }

  bool synchronous() const override { return true; }
  bool native_bf16_gemm() const override { return cpu_has_native_bf16_gemm(); }

  void* allocate(Pool pool, size_t bytes) override { return pool_alloc(pool, bytes); }
  void deallocate(Pool pool, void* ptr, size_t bytes) override { pool_free(pool, ptr, bytes); }

  // Every operation has run when its call returns: streams are names, events are nothing (a
  // timing event, a time), and waiting is free.
  Stream& compute_stream() override { return compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override { return std::make_unique<CpuStream>(name); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  void record(Event& event, Stream&) override {
    auto& e = static_cast<CpuEvent&>(event);
    if (e.timing) e.reached = std::chrono::steady_clock::now();
  }
  void wait(Stream&, Event&) override {}
  void synchronize(Event&) override {}
  void synchronize(Stream&) override {}
  void synchronize() override {}
  std::unique_ptr<Event> create_timing_event() override { return std::make_unique<CpuEvent>(true); }
  double elapsed_ms(Event& start, Event& end) override {
    const auto &s = static_cast<CpuEvent&>(start), &e = static_cast<CpuEvent&>(end);
    ZT_CHECK(s.timing && e.timing, "elapsed_ms needs two timing events (create_timing_event)");
    return std::chrono::duration<double, std::milli>(e.reached - s.reached).count();
  }

  void copy_async(void* dst, const void* src, size_t bytes, Stream&) override {
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
  }
  void cast_async(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, Stream&) override {
    if (src != dst || src_dtype != dst_dtype) convert(src, src_dtype, dst, dst_dtype, n);
  }
  void zero_async(void* dst, size_t bytes, Stream&) override {
    optimizer_->zero(dst, DType::kBF16, bytes / 2);  // in parallel, in whole 16-bit elements
    if (bytes % 2) static_cast<unsigned char*>(dst)[bytes - 1] = 0;
  }
  void launch_host_func(Stream&, std::function<void()> fn) override { fn(); }

  KernelOps<float>& ops() override { return *kernels_; }
  KernelOps<bf16>& ops_bf16() override { return *kernels_bf16_; }
  KernelOps<double>* ops_f64() override { return kernels_f64_.get(); }
  OptimizerOps& optimizer_ops() override { return *optimizer_; }

 private:
  CpuIsa isa_;
  CpuStream compute_{"compute"};
  std::unique_ptr<KernelOps<float>> kernels_;
  std::unique_ptr<KernelOps<double>> kernels_f64_;
  std::unique_ptr<KernelOps<bf16>> kernels_bf16_;  // widens tiles around fp32 kernels of its own
  std::unique_ptr<OptimizerOps> optimizer_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

bool cpu_has_native_bf16_gemm() { return cpu::cpu_has_bf16_gemm_instructions(); }
bool cpu_bf16_gemm_in_place() { return cpu::shared_bf16_gemm() != nullptr; }
size_t cpu_bf16_weight_pack_bytes(int K, int N) {
  cpu::Bf16Gemm* gemm = cpu::shared_bf16_gemm();
  return gemm && cpu::bf16_weight_packs_enabled() ? gemm->pack_bytes(K, N) : 0;
}

OptimizerOps& host_optimizer_ops() {
  static const std::unique_ptr<OptimizerOps> ops = active_cpu_isa() == CpuIsa::kAvx512
                                                       ? cpu::make_optimizer_kernels_avx512()
                                                       : cpu::make_optimizer_kernels_avx2();
  return *ops;
}

}  // namespace zt
