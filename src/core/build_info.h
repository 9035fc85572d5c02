// What a binary was built from and with: the version, the git commit, and the build's
// libraries and code paths. `--version` prints it, metrics.jsonl's start event and every
// checkpoint's manifest record it, so that a result can be traced to the build that made it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zt {

/// The build, as (key, value) pairs in a fixed order, keys in snake_case:
/// version, git_commit ("<40 hex>", with "-dirty" when the tree had uncommitted changes, or
/// "unknown" when built outside git without ZT_GIT_COMMIT), build_type, compiler, cpu_isa (the
/// paths compiled in), cpu_isa_active (the one this CPU runs, decided at run time), blas,
/// bf16_gemm, mpi, hdf5, boost, protobuf, cuda and nccl ("not built" when the CUDA backend is not).
std::vector<std::pair<std::string, std::string>> build_info();

/// `PROGRAM VERSION` on the first line, then one "key: value" line per field of build_info().
std::string version_text(const std::string& program);

}  // namespace zt
