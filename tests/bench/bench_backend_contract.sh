#!/usr/bin/env bash
# Issue 14: the backend and communicator contracts cost the CPU engine nothing. Builds
# bench_zero_stages at a reference commit (ZT_BENCH_BEFORE, default: the last commit before the
# contracts) beside this tree's, runs the two alternately (ZT_BENCH_PAIRS pairs) on the same
# shape, and compares each stage's best median step time: after / before must be <= 1.03.
# Prints the CPU it ran on; exits 1 when a stage is slower than that, or a run fails.
#
# Settings: ZT_BENCH_BEFORE (961579e), ZT_BENCH_BEFORE_BUILD (a release build directory of that
# commit to reuse instead of building one), ZT_BENCH_PAIRS (3), ZT_BENCH_RANKS (2),
# ZT_BENCH_ARGS (bench_zero_stages flags; default a 6-layer 512-wide GPT-2, block 64, batch 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${ZT_BENCH_BEFORE:-961579e}
pairs=${ZT_BENCH_PAIRS:-3}
ranks=${ZT_BENCH_RANKS:-2}
args=${ZT_BENCH_ARGS:---layers 6 --embd 512 --heads 8 --block 64 --batch 4 --steps 3 --rounds 2}
threads=$(($(nproc) / ranks > 0 ? $(nproc) / ranks : 1))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_zero_stages >/dev/null
if [[ -n "${ZT_BENCH_BEFORE_BUILD:-}" ]]; then
  before_bin=$ZT_BENCH_BEFORE_BUILD/tests/bench/bench_zero_stages
else
  ref=$(mktemp -d /tmp/zt-bench-before.XXXXXX)
  trap 'git worktree remove --force "$ref" >/dev/null 2>&1 || rm -rf "$ref"' EXIT
  git worktree add -f --detach "$ref" "$before" >/dev/null 2>&1
  (cd "$ref" && cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" --target bench_zero_stages >/dev/null)
  before_bin=$ref/build/release/tests/bench/bench_zero_stages
fi
[[ -x "$before_bin" ]] || { echo "bench_backend_contract: no $before_bin" >&2; exit 1; }

echo "# $(lscpu | sed -n 's/^Model name: *//p'); $(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2 only)"
echo "# before: $(git rev-parse --short "$before"), after: $(git rev-parse --short HEAD) (+ working tree); $ranks ranks x $threads threads; $args"
runs=$(mktemp)
for i in $(seq "$pairs"); do
  for side in before after; do
    bin=build/release/tests/bench/bench_zero_stages
    [[ $side == before ]] && bin=$before_bin
    # shellcheck disable=SC2086
    # bench_zero_stages exits 1 when its own per-stage targets (against stage 0) are missed; this
    # benchmark compares before with after only, so it needs the RESULT line, not that verdict.
    out=$(mpirun -np "$ranks" --oversubscribe -x OMP_NUM_THREADS="$threads" "$bin" $args 2>"$runs.err") || true
    line=$(grep '^RESULT' <<<"$out") || {
      cat "$runs.err" >&2
      echo "bench_backend_contract: the $side run failed" >&2
      exit 1
    }
    echo "$side $line" | tee -a "$runs"
  done
done
/usr/bin/python3 - "$runs" <<'PY'
import re, sys
best = {}
for line in open(sys.argv[1]):
    side = line.split()[0]
    for stage, ms in re.findall(r"stage(\d)_ms=([\d.]+)", line):
        key = (side, int(stage))
        best[key] = min(best.get(key, float("inf")), float(ms))
worst = 0.0
print(f"{'stage':>6} {'before_ms':>10} {'after_ms':>10} {'after/before':>13}")
for stage in range(4):
    b, a = best[("before", stage)], best[("after", stage)]
    worst = max(worst, a / b)
    print(f"{stage:>6} {b:>10.1f} {a:>10.1f} {a / b:>13.3f}")
print("OK" if worst <= 1.03 else f"FAILED: a stage is {worst:.3f}x its time before (limit 1.03)")
sys.exit(0 if worst <= 1.03 else 1)
PY
