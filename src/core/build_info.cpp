// Every fact here but cpu_isa_active is fixed when this file is compiled: the versions are those
// of the headers the build compiled against (the runtime packages of the same Debian release
// carry the same versions), and the git commit is written into zt_git_commit.h at each build
// (share/cmake/ZtGitCommit.cmake).
#include "core/build_info.h"

// Only mpi.h's version macros: without these its C++ bindings would want libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <H5public.h>
#include <mpi.h>
#include <openblas_config.h>
#include <oneapi/dnnl/dnnl_version.h>

#include <boost/version.hpp>
#include <google/protobuf/stubs/common.h>
#if ZT_HAVE_CUDA
#include <nccl.h>
#endif

#include "core/cpu_features.h"
#include "core/error.h"
#include "zt_git_commit.h"

namespace zt {

namespace {

std::string trimmed(std::string s) {
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

std::string mpi_name() {
#if defined(OMPI_MAJOR_VERSION)
  return cat("Open MPI ", OMPI_MAJOR_VERSION, ".", OMPI_MINOR_VERSION, ".", OMPI_RELEASE_VERSION, " (MPI ",
             MPI_VERSION, ".", MPI_SUBVERSION, ")");
#elif defined(MPICH_VERSION)
  return cat("MPICH ", MPICH_VERSION, " (MPI ", MPI_VERSION, ".", MPI_SUBVERSION, ")");
#else
  return cat("MPI ", MPI_VERSION, ".", MPI_SUBVERSION);
#endif
}

}  // namespace

std::vector<std::pair<std::string, std::string>> build_info() {
  return {
      {"version", ZT_VERSION},
      {"git_commit", ZT_GIT_COMMIT},
      {"build_type", ZT_BUILD_TYPE},
      {"compiler", ZT_COMPILER},
      // The build's baseline is x86-64-v3; the AVX-512 kernels carry their own target
      // attributes and oneDNN picks its AMX/AVX512-BF16 kernels itself, both at run time.
      {"cpu_isa", "x86-64-v3 baseline (AVX2, FMA, F16C); AVX-512 kernels and oneDNN bf16 GEMMs chosen at run time"},
      {"cpu_isa_active", cpu_isa_name(active_cpu_isa())},
      {"blas", trimmed(OPENBLAS_VERSION) + " (OpenMP build)"},
      {"bf16_gemm", cat("oneDNN ", DNNL_VERSION_MAJOR, ".", DNNL_VERSION_MINOR, ".", DNNL_VERSION_PATCH)},
      {"mpi", mpi_name()},
      {"hdf5", cat("HDF5 ", H5_VERS_MAJOR, ".", H5_VERS_MINOR, ".", H5_VERS_RELEASE)},
      {"boost", cat("Boost ", BOOST_VERSION / 100000, ".", BOOST_VERSION / 100 % 1000, ".", BOOST_VERSION % 100)},
      {"protobuf", cat("Protocol Buffers ", GOOGLE_PROTOBUF_VERSION / 1000000, ".",
                       GOOGLE_PROTOBUF_VERSION / 1000 % 1000, ".", GOOGLE_PROTOBUF_VERSION % 1000)},
#if ZT_HAVE_CUDA
      {"cuda", cat("CUDA ", ZT_CUDA_VERSION, ", architectures ", ZT_CUDA_ARCHITECTURES)},
      {"nccl", cat("NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, " (", ZT_NCCL_SONAME, ", loaded at first use)")},
#else
      {"cuda", "not built"},
      {"nccl", "not built"},
#endif
  };
}

std::string version_text(const std::string& program) {
  std::string text = cat(program, " ", ZT_VERSION, "\n");
  for (const auto& [key, value] : build_info()) text += cat(key, ": ", value, "\n");
  return text;
}

}  // namespace zt
