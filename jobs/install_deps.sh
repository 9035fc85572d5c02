#!/usr/bin/env bash
# Installs the Debian packages zerotrain builds, runs and tests with, when they are missing.
# Usage: jobs/install_deps.sh [--with-tests] [--with-bench] [--with-fuzz] | --check [--with-...] | --list GROUP
#   (none)        what jobs/quickstart.sh needs: the build (compiler, CMake, every -dev package
#                 the configure step finds, GoogleTest and Google Benchmark, which the default
#                 build compiles) and the runtime libraries
#   --with-tests  adds the test suite's own needs (ctest/run_tests.sh passes it): Debian's
#                 PyTorch and pip for the PyPI peers of tests/requirements.txt, the Slurm
#                 daemons, munge and PMIx that tests/integration/slurm.sh starts, mmdebstrap for
#                 tests/integration/fresh_machine.sh, and procps
#   --with-bench  adds fio and GNU time (tests/bench/)
#   --with-fuzz   adds clang and its sanitizer runtimes (the fuzz preset's libFuzzer targets)
#   --check       installs nothing: prints the missing packages on one line and exits 1 if any
#   --list GROUP  prints the packages of GROUP (runtime, build, tests, bench or fuzz), one a line; the
#                 runtime group is what the installed programs load (the .deb's Depends, and
#                 what tests/integration/fresh_machine.sh holds every library the programs load to)
# Needs root (or sudo) only when something is missing. Safe to run again.
set -euo pipefail

# What the installed programs load (readelf's NEEDED, checked by the fresh-machine test) and
# mpirun itself. Debian 12's names; the -dev packages below pull the same ones in.
runtime=(
  libc6 libstdc++6 libgcc-s1 libgomp1
  libopenmpi3 openmpi-bin
  libhdf5-103-1 zlib1g
  libboost-json1.81.0 libboost-program-options1.81.0
  libprotobuf32
  libopenblas0-openmp
  liburing2 libpcre2-8-0 libicu72 libdnnl2
)
build=(
  build-essential cmake pkg-config
  libopenmpi-dev
  libhdf5-dev zlib1g-dev
  libboost1.81-dev libboost-json1.81-dev libboost-program-options1.81-dev
  libprotobuf-dev protobuf-compiler
  libopenblas-openmp-dev
  liburing-dev libpcre2-dev libicu-dev
  # libdnnl-dev's CMake config (dnnl-config.cmake) calls find_package(OpenCL): Debian only
  # recommends the package that provides it, and we install without recommends.
  libdnnl-dev ocl-icd-opencl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
# The suite checks that HF transformers (from PyPI, tests/requirements.txt) loads our export, on
# Debian's PyTorch, runs the job scripts on a Slurm cluster it starts on this machine, makes bare
# Debian roots for the fresh-machine test, and stops stray processes with pkill; the product
# needs none of it.
tests=(
  python3 python3-pip python3-torch
  slurmctld slurmd slurm-client munge libpmix-dev
  mmdebstrap procps
)
bench=(fio time)
# The fuzz preset's libFuzzer targets (cmake --preset fuzz): clang and its sanitizer runtimes.
fuzz=(clang libclang-rt-14-dev)

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
bad() { echo "install_deps: $1 (--with-tests, --with-bench, --with-fuzz, --check, --list GROUP or --help)" >&2; exit 2; }
packages=("${runtime[@]}" "${build[@]}")
check=0
while (($#)); do
  case $1 in
    --with-tests) packages+=("${tests[@]}") ;;
    --with-bench) packages+=("${bench[@]}") ;;
    --with-fuzz) packages+=("${fuzz[@]}") ;;
    --check) check=1 ;;
    --list)
      (($# == 2)) || bad "--list takes one group: runtime, build, tests, bench or fuzz"
      case $2 in
        runtime) printf '%s\n' "${runtime[@]}" ;;
        build) printf '%s\n' "${build[@]}" ;;
        tests) printf '%s\n' "${tests[@]}" ;;
        bench) printf '%s\n' "${bench[@]}" ;;
        fuzz) printf '%s\n' "${fuzz[@]}" ;;
        *) bad "unknown group '$2'" ;;
      esac
      exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
  shift
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if ((check)); then
  echo "${missing[*]}"
  exit 1
fi

echo "install_deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
# Packages must not start their daemons here (slurmd, munge: the Slurm test starts its own);
# policy-rc.d's exit 101 tells invoke-rc.d so, and is removed again after.
policy_made=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod 755 /usr/sbin/policy-rc.d &&
    policy_made=1
fi
trap '((policy_made)) && $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# apt's own output only when it fails, so that the reason is on the screen.
log=$(mktemp)
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  rm -f "$log"
  echo "install_deps: apt-get install failed for: ${missing[*]}" >&2
  exit 1
fi
rm -f "$log"
