#!/usr/bin/env bash
# Builds zerotrain and runs the whole ctest suite, then, when called without arguments, the
# sanitizer builds (ctest/run_sanitizers.sh: the unit and MPI GoogleTests under ASan + UBSan and
# under TSan). Exits non-zero on any failure or sanitizer report. This is the command the README
# gives and .ci/run calls. Extra arguments go to ctest on the release build alone, without the
# sanitizers (for example: ./ctest/run_tests.sh -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."

./jobs/install_deps.sh --with-tests
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
# Tests share the two cores with OpenMP: one test at a time, each with every thread.
ctest --preset release --no-tests=error "$@"
if (($# == 0)); then
  ./ctest/run_sanitizers.sh
fi
