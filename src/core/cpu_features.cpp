#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zt {

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

static CpuIsa detect_isa() {
  const char* forced = std::getenv("ZT_CPU_ISA");
  if (forced && *forced) {
    if (std::strcmp(forced, "avx2") == 0) return CpuIsa::kAvx2;
    if (std::strcmp(forced, "avx512") == 0) {
      ZT_USAGE_CHECK(cpu_has_avx512(), "ZT_CPU_ISA=avx512 but this CPU lacks AVX-512F/BW/VL/DQ");
      return CpuIsa::kAvx512;
    }
    throw UsageError(cat("ZT_CPU_ISA must be avx2 or avx512, got '", forced, "'"));
  }
  return cpu_has_avx512() ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
}

CpuIsa active_cpu_isa() {
  static const CpuIsa isa = detect_isa();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? "avx512" : "avx2"; }

}  // namespace zt
