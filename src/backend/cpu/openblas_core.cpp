#include "backend/cpu/openblas_core.h"

#include <cblas.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "core/cpu_features.h"
#include "core/error.h"

// DYNAMIC_ARCH's entry points (driver/others/dynamic.c): init picks the core (OPENBLAS_CORETYPE
// first) when none is set; quit clears it. Weak, so that an OpenBLAS built for one core, which
// has neither, still links.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace zt::cpu {

namespace {

std::string note;

// OpenBLAS's x86-64 cores with AVX2 kernels (its corename()s).
bool has_avx2_kernels(std::string_view core) {
  constexpr std::array<std::string_view, 5> kCores{"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  for (std::string_view c : kCores) {
    if (core == c) return true;
  }
  return false;
}

void choose() {
  if (std::getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
  const std::string before = openblas_get_corename();
  if (has_avx2_kernels(before)) return;
  const char* want = active_cpu_isa() == CpuIsa::kAvx512 ? "SkylakeX" : "Haswell";
  // No GEMM is in flight (the kernel tables are made before anything multiplies, and this runs
  // once, under call_once), so its choice can change; nor does another thread read the
  // environment here (setenv is not thread-safe): the backend is made before the workers start.
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  const std::string after = openblas_get_corename();
  note = cat("OpenBLAS ran its ", before, " kernels on this CPU (a model it does not know); now ", after);
}

}  // namespace

void choose_openblas_core() {
  static std::once_flag once;
  std::call_once(once, choose);
}

const std::string& openblas_core_note() { return note; }

}  // namespace zt::cpu
