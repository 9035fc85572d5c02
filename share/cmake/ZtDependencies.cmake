# Finds the Debian packages zerotrain builds against (jobs/install_deps.sh installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Boost 1.81 REQUIRED COMPONENTS json program_options)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(ZLIB REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
# PCRE2 runs the pre-tokenizer regexes of HF tokenizer.json files (\p{L}, lookahead; JIT).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# ICU gives tokenizer.json's Unicode normalizers (NFC for Qwen2, NFKC, Lowercase, StripAccents).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
# oneDNN (libdnnl-dev, the OpenMP build) runs the bf16 GEMMs of bf16 training on CPUs with bf16
# instructions (AVX512-BF16, AMX); everything else keeps OpenBLAS.
find_package(dnnl REQUIRED CONFIG)
find_package(Threads REQUIRED)
# Protocol Buffers (libprotobuf and protoc) for the TensorBoard event files; Boost.CRC (header
# only, in libboost1.81-dev) for their CRC-32C.
find_package(Protobuf REQUIRED)

# OpenBLAS, the OpenMP build. Debian installs pthread, OpenMP and serial builds side by side and
# picks one through alternatives; two threading layers on the same cores spin against each other
# (see docs/design.md), so we link the OpenMP build by path, whatever the alternative points to.
find_path(ZT_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_library(ZT_OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT ZT_OPENBLAS_INCLUDE OR NOT ZT_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: install libopenblas-openmp-dev "
                      "(jobs/install_deps.sh does)")
endif()
add_library(zt::openblas UNKNOWN IMPORTED)
set_target_properties(zt::openblas PROPERTIES
  IMPORTED_LOCATION ${ZT_OPENBLAS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${ZT_OPENBLAS_INCLUDE})

# cblas_sbgemm (bf16 GEMM) exists in OpenBLAS >= 0.3.10 builds with BFLOAT16; Debian's 0.3.21 lacks it.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${ZT_OPENBLAS_INCLUDE})
set(CMAKE_REQUIRED_LIBRARIES ${ZT_OPENBLAS_LIBRARY})
check_symbol_exists(cblas_sbgemm cblas.h ZT_HAVE_SBGEMM)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)

find_package(GTest)
find_package(benchmark)
