#!/usr/bin/env bash
# Side-by-side step benchmark (issue: our step <= 0.75x PyTorch's; achieved GFLOP/s >= 60% of
# OpenBLAS sgemm on the same shapes, measured in the same run). GPT-2-small shape: 12 layers,
# 768 wide, 12 heads, vocab 50257, block 64, micro-batch 4, fp32, one rank.
#
# Settings: ZT_BENCH_THREADS (default: nproc), ZT_BENCH_STEPS (default 5), BUILD (default build/release).
# PyTorch runs at the same thread count and at 1 thread; the faster of the two is the baseline.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${ZT_BENCH_THREADS:-$(nproc)}
steps=${ZT_BENCH_STEPS:-5}
build=${BUILD:-build/release}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target bench_train_step >/dev/null

ours=$(OMP_NUM_THREADS=$threads "$build/tests/bench/bench_train_step" --steps "$steps" | tee >(cat >&2) | grep '^RESULT')
torch_same=$(/usr/bin/python3 tests/bench/torch_gpt2_step.py --threads "$threads" --steps "$steps" | tee >(cat >&2) | grep '^RESULT')
torch_one=$torch_same
if [[ $threads -ne 1 ]]; then
  torch_one=$(/usr/bin/python3 tests/bench/torch_gpt2_step.py --threads 1 --steps "$steps" | tee >(cat >&2) | grep '^RESULT')
fi
/usr/bin/python3 - "$ours" "$torch_same" "$torch_one" "$threads" <<'PY'
import re, sys
def num(text, key): return float(re.search(key + r"=([0-9.]+)", text).group(1))
ours, same, one, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
step, achieved, sgemm = num(ours, "step_ms"), num(ours, "achieved_gflops"), num(ours, "sgemm_gflops")
t_same, t_one = num(same, "torch_step_ms"), num(one, "torch_step_ms")
best = min(t_same, t_one)
ratio, eff = step / best, achieved / sgemm
print()
print(f"{'':28s}{'step ms':>10s}")
print(f"{'zerotrain (' + str(threads) + ' threads)':28s}{step:10.1f}")
print(f"{'pytorch (' + str(threads) + ' threads)':28s}{t_same:10.1f}")
print(f"{'pytorch (1 thread)':28s}{t_one:10.1f}")
print(f"step ratio zerotrain / best pytorch: {ratio:.2f}  (target <= 0.75)")
print(f"achieved {achieved:.1f} GFLOP/s vs sgemm {sgemm:.1f} GFLOP/s: {eff:.0%}  (target >= 60%)")
ok = ratio <= 0.75 and eff >= 0.60
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
