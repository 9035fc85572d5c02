// The emulated device's memory protection (backend/emulated/device_memory.h): the backend's own
// operations read and write a device buffer, and a host touch outside them dies of SIGSEGV with
// a line naming the buffer, as a GPU program dies of an illegal address. Label emulated: not in
// the sanitizer builds, whose own SIGSEGV handling would take the fault first.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/device_array.h"
#include "backend/emulated/emulated_backend.h"

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

}  // namespace
}  // namespace zt
