// OpenBLAS picks its kernels by the CPU's model when it loads, and a model newer than the library
// falls back to its generic kernels: Debian 12's OpenBLAS 0.3.21 on an Emerald Rapids Xeon
// (family 6, model 207) runs "Prescott", SSE3, at a fifth of the speed (GPT-2 124M's fp32 step on
// 2 cores: 12.4 s, against 3.05 s with OPENBLAS_CORETYPE=SkylakeX; 2026-11-28).
#pragma once

#include <string>

namespace zt::cpu {

/// Once per process, before the CPU kernels' first GEMM: where OpenBLAS runs a core older than
/// AVX2 on a CPU that has AVX2 and FMA (which every machine this build runs on has), and the
/// user set no OPENBLAS_CORETYPE, has it choose again as OPENBLAS_CORETYPE would have made it:
/// SkylakeX where the kernels run AVX-512 (active_cpu_isa), Haswell elsewhere. Needs an OpenBLAS
/// built with DYNAMIC_ARCH (Debian's is); any other is left as it is.
void choose_openblas_core();

/// What choose_openblas_core did, for logs: "" when it changed nothing, else "OpenBLAS ran its
/// Prescott kernels on this CPU; now SkylakeX".
const std::string& openblas_core_note();

}  // namespace zt::cpu
