#include "backend/emulated/device_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace zt::emulated {

namespace {

thread_local bool t_in_operation = false;

// The one DeviceMemory the fault handler consults (one emulated backend per process at a time;
// a second one is refused rather than mixed up).
std::atomic<DeviceMemory*> g_memory{nullptr};
struct sigaction g_previous {};

void on_fault(int sig, siginfo_t* info, void* context) {
  DeviceMemory* memory = g_memory.load();
  Allocation a;
  if (memory && memory->describe_fault(reinterpret_cast<uintptr_t>(info->si_addr), a)) {
    char line[400];
    const int n = std::snprintf(
        line, sizeof(line),
        "zerotrain: error: emulated backend: %s touched device memory at %p (byte %zu of device buffer #%llu, "
        "%zu bytes) %s\n",
        t_in_operation ? "a backend operation" : "the host", info->si_addr,
        size_t(reinterpret_cast<uintptr_t>(info->si_addr) - a.begin), static_cast<unsigned long long>(a.id), a.bytes,
        t_in_operation ? "that it did not declare" : "outside a backend operation: only the backend may touch device memory");
    if (n > 0) (void)!::write(STDERR_FILENO, line, size_t(n));
    // Die of the fault itself, as a GPU program dies of an illegal address.
    ::signal(SIGSEGV, SIG_DFL);
    return;
  }
  // Not ours: hand it to whoever had the signal before.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGSEGV, SIG_DFL);
}

size_t page_size() {
  static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

bool in_backend_operation() { return t_in_operation; }
void set_in_backend_operation(bool value) { t_in_operation = value; }

DeviceMemory::DeviceMemory() {
  DeviceMemory* expected = nullptr;
  ZT_CHECK(g_memory.compare_exchange_strong(expected, this),
           "only one emulated backend may exist in a process at a time");
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous);
}

DeviceMemory::~DeviceMemory() {
  ::sigaction(SIGSEGV, &g_previous, nullptr);
  g_memory.store(nullptr);
  for (auto& [begin, a] : allocations_) {
    if (a.pool == Pool::kDevice) ::munmap(reinterpret_cast<void*>(begin), a.mapped);
  }
}

void* DeviceMemory::allocate(Pool pool, size_t bytes) {
  Allocation a;
  a.pool = pool;
  a.bytes = bytes;
  if (pool == Pool::kDevice) {
    a.mapped = std::max(page_size(), (bytes + page_size() - 1) / page_size() * page_size());
    void* p = ::mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw OutOfMemory(cat("out of memory: could not map ", bytes, " bytes of emulated device memory (",
                            pool_counter(pool).in_use(), " bytes already in use): ", std::strerror(errno)));
    }
    std::memset(p, 0xff, bytes);  // NaN in every dtype: reading unwritten memory shows
    ZT_CHECK(::mprotect(p, a.mapped, PROT_NONE) == 0, "mprotect: ", std::strerror(errno));
    pool_counter(pool).add(bytes);
    a.begin = reinterpret_cast<uintptr_t>(p);
  } else {
    a.begin = reinterpret_cast<uintptr_t>(pool_alloc(pool, bytes));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  a.id = next_id_++;
  allocations_[a.begin] = a;
  return reinterpret_cast<void*>(a.begin);
}

void DeviceMemory::deallocate(Pool pool, void* ptr, size_t bytes) {
  if (!ptr) return;
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
    ZT_CHECK(it != allocations_.end() && it->second.bytes == bytes && it->second.pool == pool,
             "emulated backend: freeing ", ptr, " (", bytes, " bytes), which it did not allocate as such");
    a = it->second;
    allocations_.erase(it);
  }
  if (pool == Pool::kDevice) {
    ::munmap(ptr, a.mapped);
    pool_counter(pool).sub(bytes);
  } else {
    pool_free(pool, ptr, bytes);
  }
}

Allocation* DeviceMemory::find_locked(uintptr_t p) const {
  auto it = allocations_.upper_bound(p);
  if (it == allocations_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  // One past the end belongs to the allocation too when it is empty-sized access (n == 0).
  if (p >= a.begin + std::max<size_t>(a.bytes, 1)) return nullptr;
  return const_cast<Allocation*>(&a);
}

const Allocation* DeviceMemory::find(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find_locked(reinterpret_cast<uintptr_t>(ptr));
}

void DeviceMemory::open(const Allocation& a) {
  if (a.pool != Pool::kDevice) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Allocation& m = allocations_.at(a.begin);
  if (m.open++ == 0) {
    ZT_CHECK(::mprotect(reinterpret_cast<void*>(m.begin), m.mapped, PROT_READ | PROT_WRITE) == 0, "mprotect: ",
             std::strerror(errno));
  }
}

void DeviceMemory::close(const Allocation& a) {
  if (a.pool != Pool::kDevice) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Allocation& m = allocations_.at(a.begin);
  if (--m.open == 0) {
    ZT_CHECK(::mprotect(reinterpret_cast<void*>(m.begin), m.mapped, PROT_NONE) == 0, "mprotect: ",
             std::strerror(errno));
  }
}

bool DeviceMemory::describe_fault(uintptr_t addr, Allocation& out) {
  // In a signal handler: never block on the lock (the faulting thread may hold it).
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (a.pool != Pool::kDevice || addr >= a.begin + a.mapped) return false;
  out = a;
  return true;
}

}  // namespace zt::emulated
