#!/usr/bin/env bash
# Host collectives on one node (issue 17), side by side in one run: ShmComm against MpiComm and
# against the node's shared-memory copy bandwidth at 2 and 4 ranks (target: ShmComm's algbw >= 0.5x
# the copy at 16 MB and above, on the engine's path: all-reduce and reduce-scatter of buffers in
# shared memory, all-gather of private ones; the staged rows are printed beside them), then the ZeRO-2 and ZeRO-3 step overhead against stage 0 with the
# shared-memory collectives and with MPI's (ZT_SHM_COLLECTIVES=0). Prints the machine first.
# Exits non-zero when a bench_collectives check failed (a wrong result or ShmComm below target);
# the stage overheads are printed, not judged here (bench_zero.sh judges them).
#
# Settings: ZT_BENCH_MAX_MB (256), ZT_BENCH_ITERS (5), ZT_BENCH_STEPS (3), ZT_BENCH_ROUNDS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
max_mb=${ZT_BENCH_MAX_MB:-256}
iters=${ZT_BENCH_ITERS:-5}
steps=${ZT_BENCH_STEPS:-3}
rounds=${ZT_BENCH_ROUNDS:-2}
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_collectives bench_zero_stages >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
isa=$(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "# machine: ${model}, $(nproc) cores, ISA: ${isa:-none of avx2/avx512}; load $(cut -d' ' -f1-3 /proc/loadavg)"

rc=0
for ranks in 2 4; do
  mpirun -np "$ranks" --oversubscribe -x OMP_NUM_THREADS=1 build/release/tests/bench/bench_collectives \
    --max-mb "$max_mb" --iters "$iters" || rc=1
done

threads=$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))
for shm in 1 0; do
  echo "# ZeRO stages at 2 ranks, ZT_SHM_COLLECTIVES=$shm"
  out=$(mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS="$threads" -x ZT_SHM_COLLECTIVES="$shm" \
    build/release/tests/bench/bench_zero_stages --steps "$steps" --rounds "$rounds" --stages 023 || true)
  echo "$out"
  /usr/bin/python3 - "$(grep '^RESULT' <<<"$out" || true)" "$shm" <<'PY'
import re, sys
line, shm = sys.argv[1], sys.argv[2]
if not line:
    print(f"overhead (shm={shm}): no RESULT line"); sys.exit(0)
v = {k: float(x) for k, x in re.findall(r"(stage\d)_ms=([0-9.]+)", line)}
s0 = v["stage0"]
print(f"overhead (shm={shm}): stage 2 {v['stage2'] / s0:.2f}x stage 0, stage 3 {v['stage3'] / s0:.2f}x stage 0 "
      f"({s0:.1f} / {v['stage2']:.1f} / {v['stage3']:.1f} ms)")
PY
done
if [ "$rc" = 0 ]; then echo OK; else echo FAILED; fi
exit "$rc"
