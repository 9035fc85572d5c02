// The Backend interface: where memory lives, in what order work runs, and the kernels. Its
// contract is the one a GPU keeps (CUDA's streams and events), so that the engine above it is
// correct on a device whose work runs asynchronously and whose memory the host cannot touch:
//
//   Memory   every buffer comes from a pool that names its kind: device (the accelerator's
//            memory: only the backend's own operations touch its bytes), host, or pinned
//            (page-locked host memory a device copies to and from asynchronously).
//   Streams  work enqueued on one stream runs in order; streams run independently of each other
//            and of the host. KernelOps and OptimizerOps run on the compute stream.
//   Events   record(event, stream) marks what a stream has enqueued so far; wait(stream, event)
//            orders later work on `stream` after it; synchronize(event) blocks the host until it.
//
// A value the host needs (the loss, the gradient norm, an overflow flag) is accumulated on the
// device and read once per step with a copy and a synchronize. Nothing above backend/ touches a
// device buffer's bytes: it enqueues copies, casts, fills and kernels.
//
// The CPU backend runs every operation at once on the calling thread (a stream that is always
// complete); the emulated backend (backend/emulated) keeps the contract the way a GPU does and
// checks it; the CUDA backend implements it with real streams.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "backend/kernel_ops.h"
#include "backend/optimizer_ops.h"
#include "core/dtype.h"
#include "core/memory_pool.h"

namespace zt {

/// An ordered queue of work. Created by a Backend; used only with the backend that made it.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
};

/// A point in a stream's work, for ordering another stream or the host after it.
class Event {
 public:
  virtual ~Event() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu", "emulated" or "cuda".
  virtual std::string name() const = 0;
  /// A description for logs: SIMD level, threads, BLAS.
  virtual std::string describe() const = 0;
  /// True when every operation has finished when its call returns and device memory is host
  /// memory (the CPU backend): host-side communicators may then move device buffers directly.
  virtual bool synchronous() const = 0;
  /// True when kernels and collectives may read and write host memory of either host pool (the
  /// CPU and emulated backends); a GPU reaches only pinned memory, and slowly, so the engine keeps
  /// what kernels write on the device there (ZeroPlan::grads_on_host).
  virtual bool kernels_reach_host_memory() const { return true; }
  /// True when the device has instructions that multiply bf16 operands (a GPU's tensor cores; a
  /// CPU's AVX512-BF16 or AMX, cpu_has_native_bf16_gemm): there a bf16 run's activations are bf16
  /// by default.
  virtual bool native_bf16_gemm() const { return false; }

  // ---- memory ----
  /// Allocates from a pool with byte accounting. Device memory is not host-addressable.
  virtual void* allocate(Pool pool, size_t bytes) = 0;
  virtual void deallocate(Pool pool, void* ptr, size_t bytes) = 0;
  /// Bytes the device pool could still take now, to refuse a run that cannot fit before it
  /// allocates: a GPU's free memory (cudaMemGetInfo); where device memory is host memory (the
  /// CPU and emulated backends, device_is_host_memory), the host's available memory, which the
  /// host pools share.
  virtual size_t available_device_memory() const { return host_memory_available(); }
  /// Device memory is host memory: the device pool and the host pools draw on the same RAM.
  virtual bool device_is_host_memory() const { return true; }

  // ---- streams and events ----
  /// The stream the kernels run on.
  virtual Stream& compute_stream() = 0;
  /// A new stream (copies, collectives), running beside the compute stream.
  virtual std::unique_ptr<Stream> create_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  /// `event` completes when everything enqueued on `stream` so far has run.
  virtual void record(Event& event, Stream& stream) = 0;
  /// Work enqueued on `stream` after this call runs after `event` completes (the host does not wait).
  virtual void wait(Stream& stream, Event& event) = 0;
  /// Blocks the host until `event` completes; rethrows the first failure of the stream's work.
  virtual void synchronize(Event& event) = 0;
  /// Blocks the host until everything enqueued on `stream` has run.
  virtual void synchronize(Stream& stream) = 0;
  /// Blocks the host until every stream is idle.
  virtual void synchronize() = 0;
  /// An event that also notes when its stream reaches it, for elapsed_ms (the self-profile,
  /// --profile_steps). Recording one may cost more than a plain event's (a CUDA timing event).
  virtual std::unique_ptr<Event> create_timing_event() = 0;
  /// Milliseconds from when the stream reached `start` to when it reached `end`, two recorded
  /// timing events; waits for them to complete first (nothing to wait for after a synchronize).
  virtual double elapsed_ms(Event& start, Event& end) = 0;

  // ---- data movement, enqueued on a stream ----
  /// Copies `bytes` between any two kinds of memory (device, pinned, host, or plain host memory
  /// the backend did not allocate). Host memory involved must stay untouched until it has run.
  virtual void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  /// dst[i] = src[i] converted (round to nearest even) between dtypes; src and dst may not overlap
  /// unless they are the same pointer with the same dtype size.
  virtual void cast_async(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                          Stream& stream) = 0;
  /// Sets `bytes` bytes to zero.
  virtual void zero_async(void* dst, size_t bytes, Stream& stream) = 0;
  /// Runs `fn` on a host thread once the work before it on `stream` has run; work after it waits
  /// for it to return (cudaLaunchHostFunc). `fn` may block (a host-staged collective does) but
  /// may not call the backend. Its exception fails the stream.
  virtual void launch_host_func(Stream& stream, std::function<void()> fn) = 0;

  // ---- kernels, enqueued on the compute stream ----
  /// Compute kernels in fp32.
  virtual KernelOps<float>& ops() = 0;
  /// Compute kernels over bf16 activations (kernel_ops.h: fp32 where the numerics need it).
  virtual KernelOps<bf16>& ops_bf16() = 0;
  /// Compute kernels in fp64, for gradient checks; null when the backend has none.
  virtual KernelOps<double>* ops_f64() = 0;
  /// Optimizer and mixed-precision kernels over flat buffers.
  virtual OptimizerOps& optimizer_ops() = 0;

  // ---- conveniences over the calls above ----
  /// ops() or ops_bf16() by activation type.
  template <typename T>
  KernelOps<T>& kernels();
  /// Copies device (or any) memory into host memory and waits for it: for reads the host needs now.
  void copy_to_host(void* host_dst, const void* src, size_t bytes);
  /// Copies host memory to `dst` (any kind) and waits for it.
  void copy_from_host(void* dst, const void* host_src, size_t bytes);
};

template <>
inline KernelOps<float>& Backend::kernels<float>() { return ops(); }
template <>
inline KernelOps<bf16>& Backend::kernels<bf16>() { return ops_bf16(); }

/// The CPU backend (OpenBLAS + OpenMP + SIMD, AVX2 or AVX-512 chosen at run time).
std::unique_ptr<Backend> make_cpu_backend();
/// Whether this CPU has bf16 GEMM instructions (AVX512-BF16 or AMX, and ZT_CPU_ISA does not force
/// AVX2): the CPU backend's native_bf16_gemm().
bool cpu_has_native_bf16_gemm();
/// Whether the CPU's bf16 kernels, asked for bf16 GEMMs (a training run), multiply the bf16
/// operands as they lie (oneDNN, where that is faster than fp32 GEMMs on widened copies:
/// backend/cpu/bf16_gemm.h), so that their GEMMs and attention widen nothing into scratch.
bool cpu_bf16_gemm_in_place();
/// Bytes of the weight pack (KernelOps::weight_packs) of a K x N GEMM weight operand that the
/// CPU's bf16 kernels keep on this CPU; 0 where they keep none (no in-place bf16 GEMMs, or
/// ZT_BF16_WEIGHT_PACKS=0).
size_t cpu_bf16_weight_pack_bytes(int K, int N);

/// The CPU's optimizer kernels (OpenMP + SIMD) on host memory, called directly by the host
/// whatever the backend: the offloaded optimizer (ZeRO-Offload) steps with these.
OptimizerOps& host_optimizer_ops();

}  // namespace zt
