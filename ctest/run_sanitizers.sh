#!/usr/bin/env bash
# Builds the GoogleTest executables under AddressSanitizer + UndefinedBehaviorSanitizer (preset
# asan, build/asan: every unit and MPI GoogleTest) and under ThreadSanitizer (preset tsan,
# build/tsan: the tests that run our own threads, label threads) and runs them. Any sanitizer
# report ends its process with a non-zero status (see tests/CMakeLists.txt), which fails the test
# and this script. ./ctest/run_tests.sh calls it after the release suite.
#
#   ./ctest/run_sanitizers.sh                 both, asan then tsan
#   ./ctest/run_sanitizers.sh tsan            one of them
#   ./ctest/run_sanitizers.sh asan -R test_aio   arguments after the preset go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."

presets=(asan tsan)
case ${1:-} in
  asan|tsan) presets=("$1"); shift ;;
  "") ;;
  *) echo "usage: $0 [asan|tsan [ctest arguments...]]" >&2; exit 2 ;;
esac
jobs=$(nproc)
for preset in "${presets[@]}"; do
  start=$SECONDS
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  built=$SECONDS
  ctest --preset "$preset" --no-tests=error "$@"
  echo "$preset: build $((built - start)) s, tests $((SECONDS - built)) s"
done
