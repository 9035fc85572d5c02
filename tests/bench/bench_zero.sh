#!/usr/bin/env bash
# Multi-rank benchmarks of issue 3, side by side in one run, at 2 ranks (1 thread each on this
# 2-core machine): step time of ZeRO stages 0-3 (targets: stages 1, 2 <= 1.05x stage 0; stage 3
# <= 1.25x), the bytes each collective moved per step next to the ZeRO paper's volumes, and our
# stage 1 against PyTorch DDP + ZeroRedundancyOptimizer over gloo (target <= 0.7x).
# GPT-2-small shape: 12 layers, 768 wide, vocab 50257, block 64, micro-batch 4 per rank, fp32.
#
# Settings: ZT_BENCH_RANKS (2), ZT_BENCH_THREADS (nproc / ranks), ZT_BENCH_STEPS (3), ZT_BENCH_ROUNDS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${ZT_BENCH_RANKS:-2}
threads=${ZT_BENCH_THREADS:-$(($(nproc) / ranks > 0 ? $(nproc) / ranks : 1))}
steps=${ZT_BENCH_STEPS:-3}
rounds=${ZT_BENCH_ROUNDS:-2}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_zero_stages >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# bench_zero_stages exits non-zero when its own footer says FAILED; the PyTorch comparison still
# runs then, and the verdict below counts both. Without a RESULT line (a rank crashed) there is
# nothing to compare.
stages_rc=0
ours=$(mpirun -np "$ranks" --oversubscribe -x OMP_NUM_THREADS="$threads" build/release/tests/bench/bench_zero_stages \
  --steps "$steps" --rounds "$rounds" | tee >(cat >&2)) || stages_rc=$?
if ! grep -q '^RESULT' <<<"$ours"; then
  echo "bench_zero: bench_zero_stages failed (exit $stages_rc) before its RESULT line" >&2
  echo "FAILED"
  exit 1
fi
torch=$(/usr/bin/python3 tests/bench/torch_ddp_zero_step.py --world "$ranks" --threads "$threads" --steps "$steps" |
  tee >(cat >&2) | grep '^RESULT')
/usr/bin/python3 - "$(grep '^RESULT' <<<"$ours")" "$torch" "$(tail -1 <<<"$ours")" "$stages_rc" <<'PY'
import re, sys
def num(text, key): return float(re.search(key + r"=([0-9.]+)", text).group(1))
ours, torch, stage_verdict, stages_rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s1, t = num(ours, "stage1_ms"), num(torch, "torch_ddp_zero_step_ms")
ratio = s1 / t
print()
print(f"zerotrain stage 1: {s1:.1f} ms/step; PyTorch DDP + ZeroRedundancyOptimizer (gloo): {t:.1f} ms/step")
print(f"ratio {ratio:.2f} (target <= 0.70); stage-overhead targets: {stage_verdict}")
if stages_rc != 0:
    print(f"bench_zero_stages exited {stages_rc}")
ok = ratio <= 0.70 and stage_verdict == "OK" and stages_rc == 0
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
