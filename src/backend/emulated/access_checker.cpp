#include "backend/emulated/access_checker.h"

#include <algorithm>

#include "core/error.h"

namespace zt::emulated {

void merge(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

namespace {

uint64_t seen(const VectorClock& clock, int stream) {
  return size_t(stream) < clock.size() ? clock[size_t(stream)] : 0;
}

}  // namespace

void AccessChecker::access(uint64_t allocation, uintptr_t base, const std::string& buffer, const AccessRange& range,
                           int stream,
                           const VectorClock& clock, const std::string& op,
                           const std::vector<std::string>& stream_names) {
  if (range.hi <= range.lo) return;
  std::vector<Record>& records = records_[allocation];
  for (const Record& r : records) {
    const bool overlap = r.range.lo < range.hi && range.lo < r.range.hi;
    if (!overlap || !(r.range.write || range.write) || r.stream == stream) continue;
    if (r.clock <= seen(clock, r.stream)) continue;  // ordered by an event or a host synchronisation
    throw Error(cat("emulated backend: missing synchronisation: ", op, " on stream '", stream_names[size_t(stream)],
                    "' ", range.write ? "writes" : "reads", " bytes [", range.lo - base, ", ", range.hi - base, ") of ",
                    buffer, " that ", r.op, " on stream '", stream_names[size_t(r.stream)], "' ",
                    r.range.write ? "writes" : "reads", ", with no event wait between them"));
  }
  // An access ordered before this one and inside its range says nothing a later check needs
  // when this one writes (whatever conflicts with it conflicts with this one, and whatever is
  // ordered after this one is ordered after it), or when both read on this stream.
  std::erase_if(records, [&](const Record& r) {
    const bool inside = range.lo <= r.range.lo && r.range.hi <= range.hi;
    const bool ordered = r.stream == stream || r.clock <= seen(clock, r.stream);
    return inside && ordered && (range.write || (!r.range.write && r.stream == stream));
  });
  // A bound on the bookkeeping (a missed report is possible past it, a false one is not).
  if (records.size() > 4096) records.erase(records.begin(), records.begin() + 2048);
  records.push_back({range, stream, clock[size_t(stream)], op});
}

}  // namespace zt::emulated
