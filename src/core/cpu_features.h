// Which SIMD level the CPU kernels run at, decided once at run time. The build's baseline is AVX2;
// AVX-512 paths are used when the CPU has AVX512F/BW/VL/DQ, unless ZT_CPU_ISA=avx2 forces the
// AVX2 path (tests run both).
#pragma once

namespace zt {

enum class CpuIsa { kAvx2, kAvx512 };

/// The ISA the kernels use: AVX-512 when present and not disabled by ZT_CPU_ISA=avx2.
CpuIsa active_cpu_isa();
/// True when the CPU itself supports the AVX-512 subset the kernels use.
bool cpu_has_avx512();
/// "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);

}  // namespace zt
