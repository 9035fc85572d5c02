// The emulated device's memory protection (backend/emulated/device_memory.h): the backend's own
// operations read and write a device buffer, and a host touch outside them dies of SIGSEGV with
// a line naming the buffer, as a GPU program dies of an illegal address. Then the newest queued
// ops against the CPU backend, on buffers of exactly their size. Label emulated: not in the
// sanitizer builds, whose own SIGSEGV handling would take the fault first.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "backend/emulated/emulated_backend.h"
#include "random_test_util.h"

namespace zt {
namespace {

// 4000 bytes, element 10 = byte 40: numbers the fault line must repeat. The buffer is the
// backend's second allocation (#2), so the line must name this buffer and not the first one.
constexpr size_t kCount = 1000;
constexpr size_t kTouched = 10;
constexpr const char* kFaultLine =
    "emulated backend: the host touched device memory at 0x[0-9a-f]+ \\(byte 40 of device buffer #2, 4000 bytes\\) "
    "outside a backend operation";

TEST(EmulatedDevice, OnlyTheBackendTouchesDeviceMemory) {
  // The backend runs one thread per stream: the death tests' child re-runs this test from the
  // start (threadsafe style) instead of forking a process whose stream threads are gone.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto backend = make_emulated_backend();
  DeviceArray<uint32_t> other(*backend, 16);
  DeviceArray<uint32_t> buffer(*backend, kCount);

  // Fresh device memory is 0xff bytes; what copy_from_host wrote, copy_to_host reads back.
  std::vector<uint32_t> back(kCount, 0);
  backend->copy_to_host(back.data(), buffer.data(), buffer.bytes());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(back[i], 0xffffffffu) << "fresh element " << i;
  std::vector<uint32_t> written(kCount);
  for (size_t i = 0; i < kCount; ++i) written[i] = uint32_t(i * 2654435761u + 7);
  backend->copy_from_host(buffer.data(), written.data(), buffer.bytes());
  std::fill(back.begin(), back.end(), 0);
  backend->copy_to_host(back.data(), buffer.data(), buffer.bytes());
  ASSERT_EQ(std::memcmp(back.data(), written.data(), buffer.bytes()), 0);

  // The same buffer, touched by the host after the backend's operations on it have finished.
  volatile uint32_t* host_view = buffer.data();
  EXPECT_EXIT({ (void)host_view[kTouched]; }, testing::KilledBySignal(SIGSEGV), kFaultLine) << "a host read";
  EXPECT_EXIT({ host_view[kTouched] = 1; }, testing::KilledBySignal(SIGSEGV), kFaultLine) << "a host write";
}

// Timing events (the self-profile's, --profile_steps) time the stream, not the host: the host
// enqueues both events and a 100 ms task between them at once; the stream takes the 100 ms.
TEST(EmulatedDevice, TimingEventsTimeTheStream) {
  auto backend = make_emulated_backend();
  Stream& stream = backend->compute_stream();
  auto start = backend->create_timing_event(), end = backend->create_timing_event();
  const auto host_start = std::chrono::steady_clock::now();
  backend->record(*start, stream);
  backend->launch_host_func(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
  backend->record(*end, stream);
  const double enqueue_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
  EXPECT_GE(backend->elapsed_ms(*start, *end), 100.0);
  EXPECT_LT(enqueue_ms, 100.0) << "record and launch_host_func do not wait for the stream";
}

// ---- ops through the emulated device ------------------------------------------------------------
// The ops that the Llama family added, and those whose arguments may now be null, run on the
// emulated device and on the CPU backend on the same inputs. The emulated device runs the CPU
// kernels, so the results agree to rounding (1e-6 of the largest value leaves room for a GEMM that
// splits its work by thread, nothing more); what this checks is each queued wrapper's declared
// accesses. Every buffer has exactly the op's size, so a wrapper that declares more bytes than
// kernel_ops.h's shapes fails the backend's range check, and one that leaves an argument out dies
// of SIGSEGV when the kernel touches it.

constexpr double kSameKernelTol = 1e-6;

/// The same array on both backends, filled from one host vector.
template <typename T>
struct Twin {
  Backend* emu;
  DeviceArray<T> e, c;
  T* on(Backend& b) { return &b == emu ? e.data() : c.data(); }
};

class EmulatedOps : public testing::Test {
 protected:
  std::unique_ptr<Backend> emu = make_emulated_backend();
  std::unique_ptr<Backend> cpu = make_cpu_backend();

  template <typename T>
  Twin<T> twin(const std::vector<T>& host) {
    Twin<T> t{emu.get(), DeviceArray<T>(*emu, host.size()), DeviceArray<T>(*cpu, host.size())};
    emu->copy_from_host(t.e.data(), host.data(), host.size() * sizeof(T));
    cpu->copy_from_host(t.c.data(), host.data(), host.size() * sizeof(T));
    return t;
  }
  Twin<float> twin_randn(size_t n, uint32_t seed) { return twin(randn(n, seed)); }

  void on_both(const std::function<void(Backend&)>& fn) {
    fn(*emu);
    fn(*cpu);
  }

  void expect_same(const Twin<float>& t, const char* what) {
    std::vector<float> got(t.e.size()), want(t.c.size());
    emu->copy_to_host(got.data(), t.e.data(), t.e.bytes());
    cpu->copy_to_host(want.data(), t.c.data(), t.c.bytes());
    double err = 0, ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
      ref = std::max(ref, std::fabs(double(want[i])));
    }
    EXPECT_LE(err, kSameKernelTol * std::max(ref, 1.0)) << what;
  }
};

constexpr int kB = 2, kT = 7, kC = 12, kV = 19;

TEST_F(EmulatedOps, EmbeddingWithoutPositions) {
  std::vector<int32_t> tokens_host(kB * kT);
  for (size_t i = 0; i < tokens_host.size(); ++i) tokens_host[i] = int32_t(i * 7 % 5);  // repeated tokens
  auto tokens = twin(tokens_host);
  auto wte = twin_randn(kV * kC, 1), out = twin_randn(kB * kT * kC, 2), dout = twin_randn(kB * kT * kC, 3);
  auto dwte = twin_randn(kV * kC, 4);
  on_both([&](Backend& b) {
    b.ops().embedding_forward(out.on(b), tokens.on(b), wte.on(b), nullptr, kB, kT, kC);
    b.ops().embedding_backward(dwte.on(b), nullptr, dout.on(b), tokens.on(b), kB, kT, kC);
  });
  expect_same(out, "embedding_forward");
  expect_same(dwte, "embedding_backward");
}

TEST_F(EmulatedOps, Linear) {
  const int rows = kB * kT, in = kC, out_dim = kV;
  auto x = twin_randn(rows * in, 10), w = twin_randn(out_dim * in, 11), bias = twin_randn(out_dim, 12);
  auto out = twin_randn(rows * out_dim, 13), out_no_bias = twin_randn(rows * out_dim, 14);
  auto dout = twin_randn(rows * out_dim, 15), dx = twin_randn(rows * in, 16), dx_acc = twin_randn(rows * in, 17);
  auto dw = twin_randn(out_dim * in, 18), db = twin_randn(out_dim, 19);
  on_both([&](Backend& b) {
    b.ops().linear_forward(out.on(b), x.on(b), w.on(b), bias.on(b), rows, in, out_dim);
    b.ops().linear_forward(out_no_bias.on(b), x.on(b), w.on(b), nullptr, rows, in, out_dim);
    b.ops().linear_backward(dx.on(b), dw.on(b), db.on(b), dout.on(b), x.on(b), w.on(b), rows, in, out_dim, false);
    b.ops().linear_backward(dx_acc.on(b), dw.on(b), nullptr, dout.on(b), x.on(b), w.on(b), rows, in, out_dim, true);
    b.ops().linear_backward(nullptr, dw.on(b), nullptr, dout.on(b), x.on(b), w.on(b), rows, in, out_dim, false);
  });
  expect_same(out, "linear_forward");
  expect_same(out_no_bias, "linear_forward without bias");
  expect_same(dx, "linear_backward dx");
  expect_same(dx_acc, "linear_backward dx accumulated");
  expect_same(dw, "linear_backward dweight");
  expect_same(db, "linear_backward dbias");
}

TEST_F(EmulatedOps, Rmsnorm) {
  const int rows = kB * kT;
  auto x = twin_randn(rows * kC, 20), w = twin_randn(kC, 21), out = twin_randn(rows * kC, 22);
  auto rstd = twin_randn(rows, 23), dout = twin_randn(rows * kC, 24), dx = twin_randn(rows * kC, 25);
  auto dw = twin_randn(kC, 26);
  on_both([&](Backend& b) {
    b.ops().rmsnorm_forward(out.on(b), rstd.on(b), x.on(b), w.on(b), rows, kC, 1e-5);
    b.ops().rmsnorm_backward(dx.on(b), dw.on(b), dout.on(b), x.on(b), w.on(b), rstd.on(b), rows, kC);
  });
  expect_same(out, "rmsnorm_forward");
  expect_same(rstd, "rmsnorm_forward rstd");
  expect_same(dx, "rmsnorm_backward dx");
  expect_same(dw, "rmsnorm_backward dweight");
}

TEST_F(EmulatedOps, RotaryAndSwiglu) {
  const int heads = 3, hs = 8;
  auto x = twin_randn(size_t(kB) * kT * heads * hs, 30), x_inverse = twin_randn(size_t(kB) * kT * heads * hs, 39);
  auto cosines = twin_randn(size_t(kT) * hs / 2, 31), sines = twin_randn(size_t(kT) * hs / 2, 32);
  const size_t n = 37;
  auto gate = twin_randn(n, 33), up = twin_randn(n, 34), out = twin_randn(n, 35), dout = twin_randn(n, 36);
  auto dgate = twin_randn(n, 37), dup = twin_randn(n, 38);
  on_both([&](Backend& b) {
    b.ops().rotary(x.on(b), cosines.on(b), sines.on(b), kB, kT, heads, hs, false);
    b.ops().rotary(x_inverse.on(b), cosines.on(b), sines.on(b), kB, kT, heads, hs, true);
    b.ops().swiglu_forward(out.on(b), gate.on(b), up.on(b), n);
    b.ops().swiglu_backward(dgate.on(b), dup.on(b), dout.on(b), gate.on(b), up.on(b), n);
  });
  expect_same(x, "rotary");
  expect_same(x_inverse, "rotary inverse");
  expect_same(out, "swiglu_forward");
  expect_same(dgate, "swiglu_backward dgate");
  expect_same(dup, "swiglu_backward dup");
}

TEST_F(EmulatedOps, GqaAttention) {
  const int NH = 4, NKV = 2, hs = 6, Tk = kT + 3;  // forward with 3 cached positions, backward without
  auto q = twin_randn(size_t(kB) * kT * NH * hs, 40);
  auto k = twin_randn(size_t(kB) * kT * NKV * hs, 41), v = twin_randn(size_t(kB) * kT * NKV * hs, 42);
  auto k_cache = twin_randn(size_t(kB) * Tk * NKV * hs, 43), v_cache = twin_randn(size_t(kB) * Tk * NKV * hs, 44);
  auto out = twin_randn(size_t(kB) * kT * NH * hs, 45), att = twin_randn(size_t(kB) * NH * kT * kT, 46);
  auto out_cached = twin_randn(size_t(kB) * kT * NH * hs, 47), att_cached = twin_randn(size_t(kB) * NH * kT * Tk, 48);
  auto dout = twin_randn(size_t(kB) * kT * NH * hs, 49), dq = twin_randn(size_t(kB) * kT * NH * hs, 50);
  auto dk = twin_randn(size_t(kB) * kT * NKV * hs, 51), dv = twin_randn(size_t(kB) * kT * NKV * hs, 52);
  on_both([&](Backend& b) {
    b.ops().gqa_attention_forward(out.on(b), att.on(b), q.on(b), k.on(b), v.on(b), kB, kT, kT, NH, NKV, hs);
    b.ops().gqa_attention_backward(dq.on(b), dk.on(b), dv.on(b), dout.on(b), out.on(b), q.on(b), k.on(b), v.on(b),
                                   att.on(b), kB, kT, NH, NKV, hs);
    b.ops().gqa_attention_forward(out_cached.on(b), att_cached.on(b), q.on(b), k_cache.on(b), v_cache.on(b), kB, kT,
                                  Tk, NH, NKV, hs);
  });
  expect_same(out, "gqa_attention_forward");
  expect_same(att, "gqa_attention_forward att");
  expect_same(dq, "gqa_attention_backward dq");
  expect_same(dk, "gqa_attention_backward dk");
  expect_same(dv, "gqa_attention_backward dv");
  expect_same(out_cached, "gqa_attention_forward with a KV cache");
  expect_same(att_cached, "gqa_attention_forward with a KV cache att");
}

}  // namespace
}  // namespace zt
