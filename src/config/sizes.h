// Human-written sizes on command lines: "2783M" parameters, "80GB" of memory, "5GB" shards.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

enum class SizeKind {
  kCount,        ///< parameters: K, M, B (or G), T = 10^3.. 10^12; plain numbers and 7e9
  kBytesSI,      ///< bytes, HF's convention: KB, MB, GB, TB = 10^3.. 10^12; KiB, MiB, GiB, TiB = 2^10..
  kBytesMemory,  ///< bytes of memory: KB/KiB, MB/MiB, GB/GiB, TB/TiB all powers of 2 (an "80GB" GPU has 80 GiB)
};

/// Parses a positive size; throws UsageError naming `what` (the flag) for anything else: a
/// negative or zero value, no number, or a suffix the kind does not know.
uint64_t parse_size(const std::string& text, SizeKind kind, const std::string& what);

}  // namespace zt
