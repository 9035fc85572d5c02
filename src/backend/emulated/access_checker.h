// The emulated backend's race detector: every operation declares the byte ranges it reads and
// writes, and an access that conflicts with an earlier one on another stream must be ordered
// after it by an event (or by a host synchronisation before it was enqueued). Vector clocks over
// the streams, as in ThreadSanitizer, computed when work is enqueued: a missing wait is reported
// every time, however the threads happen to run, with both operations named.
//
//   stream s enqueues an operation   clock[s][s] += 1; the operation carries (s, clock[s][s])
//   record(e, s)                      e.clock = clock[s]
//   wait(t, e)                        clock[t] = max(clock[t], e.clock)
//   host synchronises on e / s        host = max(host, e.clock / clock[s]); every enqueue starts
//                                     with clock[s] = max(clock[s], host)
//
// An earlier access (s', c') is ordered before an operation on s when clock[s][s'] >= c'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zt::emulated {

using VectorClock = std::vector<uint64_t>;

/// Element-wise max into `into`.
void merge(VectorClock& into, const VectorClock& from);

struct AccessRange {
  uintptr_t lo = 0, hi = 0;
  bool write = false;
};

class AccessChecker {
 public:
  /// Checks an operation of stream `stream` whose clock is `clock` (after its own tick) against
  /// what earlier operations did to allocation `allocation`, then records it. Throws zt::Error
  /// naming both operations when one is unordered with a conflicting earlier access.
  /// `base` is the allocation's first byte (for the message's offsets).
  void access(uint64_t allocation, uintptr_t base, const std::string& buffer, const AccessRange& range, int stream,
              const VectorClock& clock, const std::string& op, const std::vector<std::string>& stream_names);
  /// Forgets a freed allocation.
  void forget(uint64_t allocation) { records_.erase(allocation); }

 private:
  struct Record {
    AccessRange range;
    int stream = 0;
    uint64_t clock = 0;
    std::string op;
  };
  std::map<uint64_t, std::vector<Record>> records_;
};

}  // namespace zt::emulated
