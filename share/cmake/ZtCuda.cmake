# ZT_CUDA=AUTO builds the CUDA backend and the NCCL communicator when nvcc is found (the release
# preset; CI builds them on machines that have the toolkit but no GPU), ON requires them, OFF
# skips them. Sets ZT_CUDA_ENABLED and, when on, ZT_NCCL_INCLUDE_DIR, ZT_NCCL_SONAME and
# ZT_NCCL_LIBRARY_DIR (what comm/nccl_lazy.cpp loads, and where else to look for it).
set(ZT_CUDA_ENABLED OFF)
if(NOT ZT_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ZT_CUDA must be AUTO, ON or OFF (got '${ZT_CUDA}')")
endif()
if(ZT_CUDA STREQUAL "OFF")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(ZT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZT_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or CUDACXX)")
  endif()
  message(STATUS "zerotrain: no nvcc found, building the CPU backend only")
  return()
endif()

# CUDA 13 has no sm_70: Ampere and Hopper as real code, plus Hopper PTX for later GPUs. Set before
# enable_language, which would otherwise pick the compiler's default architecture.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
endif()
enable_language(CUDA)
# CMake 3.25 does not know nvcc 13's C++20 flag; without these the CUDA standard is ignored.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# The runtime as a shared library, so that one process loads one copy with the libraries that use
# it (cuBLASLt, NCCL); nothing links the driver library libcuda, which machines without a GPU lack.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
find_package(CUDAToolkit REQUIRED)

# NCCL ships with the toolkit on our machines; NCCL_ROOT points elsewhere.
find_path(ZT_NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(ZT_NCCL_LIBRARY nccl HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
if(NOT ZT_NCCL_INCLUDE_DIR OR NOT ZT_NCCL_LIBRARY)
  if(ZT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZT_CUDA=ON but NCCL was not found (set NCCL_ROOT)")
  endif()
  message(STATUS "zerotrain: nvcc found but not NCCL, building the CPU backend only")
  return()
endif()
# The major version names the shared library zerotrain loads (libnccl.so.<major>, comm/nccl_lazy.cpp).
file(STRINGS ${ZT_NCCL_INCLUDE_DIR}/nccl.h nccl_major_line REGEX "^#define NCCL_MAJOR [0-9]+")
string(REGEX MATCH "[0-9]+$" ZT_NCCL_MAJOR "${nccl_major_line}")
if(NOT ZT_NCCL_MAJOR)
  message(FATAL_ERROR "zerotrain: cannot read NCCL_MAJOR from ${ZT_NCCL_INCLUDE_DIR}/nccl.h")
endif()
set(ZT_NCCL_SONAME "libnccl.so.${ZT_NCCL_MAJOR}")
get_filename_component(ZT_NCCL_LIBRARY_DIR ${ZT_NCCL_LIBRARY} DIRECTORY)

set(ZT_CUDA_ENABLED ON)
message(STATUS "zerotrain: CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_ARCHITECTURES}), NCCL ${ZT_NCCL_LIBRARY}")
