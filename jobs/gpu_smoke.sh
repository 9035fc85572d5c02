#!/usr/bin/env bash
# The GPU smoke test, for a machine with a GPU: installs what is missing (jobs/install_deps.sh),
# builds the release preset with the CUDA backend (ZT_CUDA=ON), runs the gpu tests
# (ctest -L gpu), then each GPU benchmark there is, and prints their figures, the GPU
# (nvidia-smi) and the date. Ends with a table of what ran and OK or FAILED.
#
#   jobs/gpu_smoke.sh                        # from a checkout, or from a copy of one (no git needed)
#   jobs/gpu_smoke.sh --no-install --jobs 16 # offline: say what is missing, install nothing
#   jobs/gpu_smoke.sh --skip-build --build-dir /scratch/zt-build
#
# Options:
#   --build-dir DIR  the build                            (default: build/release, the preset's)
#   --skip-build     use the build in DIR as it is: no configure, no build
#   --jobs N         parallel build jobs                  (default: the number of cores)
#   --no-install     do not run jobs/install_deps.sh; print the Debian packages that are missing
#                    and go on (a machine without network access)
#
# Exit code: 0 when everything ran and passed on a GPU; 1 when something failed, including a
# gpu test skipped while nvidia-smi shows a GPU (a skip there means the build or the driver is
# wrong); 2 for a bad option; 77 (skipped) on a machine where nvidia-smi shows no GPU, after
# building and running what runs without one (the gpu tests then say why they skip).
#
# Benchmarks: bench_gpu_nccl, bench_gpu_train, bench_gpu_adam and any other bench_gpu_*: the
# script tests/bench/NAME.sh when there is one (run from the checkout, with ZT_BIN_DIR and
# ZT_SOURCE_DIR set), else the executable NAME in the build; a name with neither is reported
# absent, not failed. Each runs under a time limit of ZT_SMOKE_BENCH_TIMEOUT seconds (default 1800).
# Settings (environment):
#   ZT_SMOKE_BENCH_TIMEOUT  seconds each benchmark may run  (default: 1800)
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$root/build/release
skip_build=0
install=1
jobs=$(nproc)
bench_timeout=${ZT_SMOKE_BENCH_TIMEOUT:-1800}

say() { echo "gpu_smoke: $*" >&2; }
usage_error() { say "$*"; exit 2; }
while (($#)); do
  case $1 in
    --build-dir) [[ -n ${2:-} ]] || usage_error "--build-dir needs a directory"; build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; [[ -n $build_dir ]] || usage_error "--build-dir needs a directory"; shift ;;
    --jobs | -j) jobs=${2:-}; shift $(($# >= 2 ? 2 : 1)) ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --skip-build) skip_build=1; shift ;;
    --no-install) install=0; shift ;;
    *) usage_error "unknown argument '$1' (--build-dir DIR, --skip-build, --jobs N, --no-install or --help)" ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || usage_error "--jobs must be a positive number, got '$jobs'"
[[ $bench_timeout =~ ^[1-9][0-9]*$ ]] || usage_error "ZT_SMOKE_BENCH_TIMEOUT must be a positive number of seconds, got '$bench_timeout'"
[[ $build_dir == /* ]] || build_dir=$PWD/$build_dir
if ((skip_build)) && [[ ! -f $build_dir/CMakeCache.txt ]]; then
  usage_error "--skip-build: no build in $build_dir (no CMakeCache.txt); leave out --skip-build to make one"
fi
cd "$root" || exit 1

results=()  # "what|verdict" lines for the closing table
failed=0
record() {  # record WHAT VERDICT: VERDICT ok, skipped or absent, or anything else (a failure)
  results+=("$1|$2")
  case $2 in ok | skipped* | absent*) ;; *) failed=1 ;; esac
}
section() { printf '\n== %s\n' "$*"; }

# ---- the GPU ----
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if ((gpus > 0)); then
  section "$gpus GPU(s): $(nvidia-smi -L 2>/dev/null | head -n 1)"
else
  section "no GPU: nvidia-smi $(command -v nvidia-smi >/dev/null && echo "lists none" || echo "is not installed"); building and running what runs without one"
fi

# ---- dependencies ----
if ((install)); then
  section "dependencies (jobs/install_deps.sh)"
  if ./jobs/install_deps.sh; then
    record "dependencies" ok
  else
    say "jobs/install_deps.sh failed (no network? then run again with --no-install)"
    record "dependencies" "FAILED (install_deps.sh)"
  fi
else
  section "dependencies: not installing (--no-install)"
  if missing=$(./jobs/install_deps.sh --check); then
    echo "every package jobs/install_deps.sh installs is present"
    record "dependencies" ok
  else
    echo "missing Debian packages: $missing"
    record "dependencies" "skipped (--no-install; missing: $missing)"
  fi
fi

# ---- build ----
if ((skip_build)); then
  section "build: using $build_dir as it is (--skip-build)"
  record "build" "skipped (--skip-build)"
else
  # The compiler CMake would take (cmake/ZtCuda.cmake): CUDACXX, else /usr/local/cuda's, else PATH's.
  nvcc=${CUDACXX:-}
  [[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  [[ -z $nvcc ]] && nvcc=$(command -v nvcc)
  if [[ -n ${CUDACXX:-} && ! -x $nvcc ]]; then
    say "CUDACXX=$CUDACXX: not an executable (it names the CUDA compiler, nvcc)"
    record "build" "FAILED (no nvcc)"
  elif [[ -z $nvcc ]]; then
    say "no nvcc: CUDACXX is unset, there is no /usr/local/cuda/bin/nvcc and none on PATH; install the CUDA toolkit or set CUDACXX"
    record "build" "FAILED (no nvcc)"
  else
    section "build: release preset, ZT_CUDA=ON ($nvcc: $("$nvcc" --version | grep -o 'release [0-9.]*')), $build_dir, -j $jobs"
    log=$(mktemp)
    if cmake --preset release -B "$build_dir" -DZT_CUDA=ON >"$log" 2>&1; then
      grep 'zerotrain: CUDA' "$log"
      if cmake --build "$build_dir" -j "$jobs"; then record "build" ok; else record "build" FAILED; fi
    else
      cat "$log"
      record "build" "FAILED (configure: ZT_CUDA=ON, log above)"
    fi
    rm -f "$log"
  fi
fi

# ---- the gpu tests ----
if [[ ! -f $build_dir/CTestTestfile.cmake || ${results[-1]} == "build|FAILED"* ]]; then
  record "ctest -L gpu" "FAILED (not run: the build failed)"
else
  if [[ $build_dir -ef $root/build/release ]]; then
    where=(--preset release)
  else
    where=(--test-dir "$build_dir")
  fi
  section "ctest ${where[*]} -L gpu --output-on-failure"
  log=$(mktemp)
  ctest "${where[@]}" -L gpu --output-on-failure --no-tests=error 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  skipped=$(grep -c '\*\*\*Skipped' "$log")
  ran=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$log")
  rm -f "$log"
  if ((rc != 0)); then
    record "ctest -L gpu" "FAILED (exit $rc)"
  elif ((skipped > 0 && gpus > 0)); then
    record "ctest -L gpu" "FAILED ($skipped of $ran skipped although nvidia-smi shows a GPU)"
  elif ((skipped > 0)); then
    record "ctest -L gpu" "skipped ($skipped of $ran: no GPU)"
  else
    record "ctest -L gpu" ok
  fi
fi

# ---- the benchmarks ----
names=(bench_gpu_nccl bench_gpu_train bench_gpu_adam)
for found in tests/bench/bench_gpu_*.sh "$build_dir"/tests/bench/bench_gpu_*; do
  [[ -e $found ]] || continue
  name=$(basename "$found" .sh)
  [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
done
for name in "${names[@]}"; do
  if [[ -f tests/bench/$name.sh ]]; then
    command=(bash "tests/bench/$name.sh")
  elif [[ -x $build_dir/tests/bench/$name ]]; then
    command=("$build_dir/tests/bench/$name")
  else
    echo "$name: not in this checkout or build, skipped"
    record "$name" "absent"
    continue
  fi
  if ((gpus == 0)); then
    echo "$name: no GPU, not run"
    record "$name" "skipped (no GPU)"
    continue
  fi
  section "$name: ${command[*]}"
  ZT_BIN_DIR=$build_dir ZT_SOURCE_DIR=$root timeout -k 10 "$bench_timeout" "${command[@]}"
  rc=$?
  if ((rc == 0)); then
    record "$name" ok
  elif ((rc == 124 || rc == 137)); then
    record "$name" "FAILED (over ${bench_timeout} s)"
  else
    record "$name" "FAILED (exit $rc)"
  fi
done

# ---- where it ran, and the verdict ----
section "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
else
  echo "nvidia-smi: not installed"
fi
date
section "summary"
for line in "${results[@]}"; do printf '  %-16s %s\n' "${line%%|*}" "${line#*|}"; done
if ((failed)); then
  echo "FAILED"
  exit 1
elif ((gpus == 0)); then
  echo "SKIPPED: no GPU, nothing ran on one"
  exit 77
fi
echo "OK"
