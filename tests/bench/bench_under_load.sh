#!/usr/bin/env bash
# A 2-rank ZeRO-2 run on a busy machine (issue 13): the trainer's median step time with one busy
# process per core running beside it, against the quiet step measured in the same run (quiet,
# loaded, quiet again). Check: loaded <= 4x quiet (issue 13; see the end). An MPI progress thread
# that only runs on idle cycles took 70 s for a 16 ms step here (4400x).
#
# Settings: ZT_BENCH_MODEL (GPT-2 small's shape: configs/models/gpt2-124M.json), ZT_BENCH_BATCH (4),
# ZT_BENCH_BLOCK (64), ZT_BENCH_STEPS (12 per run), ZT_BENCH_TIMEOUT (600 s per run: a stall fails),
# ZT_BIN_DIR (a build to use; otherwise the release preset is built). The under_load test runs it
# on the demo model.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${ZT_BENCH_MODEL:-configs/models/gpt2-124M.json}
batch=${ZT_BENCH_BATCH:-4}
block=${ZT_BENCH_BLOCK:-64}
steps=${ZT_BENCH_STEPS:-12}
limit=${ZT_BENCH_TIMEOUT:-600}
if [[ -z ${ZT_BIN_DIR:-} ]]; then
  ./jobs/install_deps.sh
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target zerotrain zero_prepare_data >/dev/null
  ZT_BIN_DIR=build/release
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/zt_load.XXXXXX)
busy=()
cleanup() {
  ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$ZT_BIN_DIR/tools/zero_prepare_data" share/data/tinyshakespeare.txt --output_dir "$work/data" 2>/dev/null

# run NAME: one 2-rank ZeRO-2 run; prints its median step time in ms (the first 2 steps left out).
run() {
  if ! OMP_NUM_THREADS=1 timeout "$limit" mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS \
       "$ZT_BIN_DIR/src/zerotrain" --deepspeed configs/zero2.json --config_name "$model" \
       --train_data "$work/data/train_*.bin" --output_dir "$work/$1" --block_size "$block" \
       --per_device_train_batch_size "$batch" --max_steps "$steps" --logging_steps 1 --save_strategy no \
       --disable_tqdm 2>"$work/$1.log"; then
    echo "bench_under_load: the $1 run failed or ran past ${limit} s: $(tail -1 "$work/$1.log")" >&2
    return 1
  fi
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [l["step_ms"] for l in map(json.loads, open(sys.argv[1])) if l["event"] == "step"][2:]
print(f"{statistics.median(ms):.2f}")' "$work/$1/metrics.jsonl"
}

echo "# bench_under_load: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
  "model $model, micro-batch ${batch}x$block per rank, 2 ranks x 1 thread, ZeRO-2"
quiet1=$(run quiet1)
for ((i = 0; i < $(nproc); i++)); do
  sh -c 'while :; do :; done' &
  busy+=($!)
done
loaded=$(run loaded)
kill "${busy[@]}" 2>/dev/null
wait "${busy[@]}" 2>/dev/null || true
busy=()
quiet2=$(run quiet2)
# The floor is 2x (each rank shares its core with a busy process); the rest is one scheduling
# wait per collective per rank. Under CFS (before Linux 6.6) a woken rank preempted the busy
# process at once; under EEVDF (6.6 on) it waits for the busy process's slice (~1.4 ms on 2 cores).
# With HF's "auto" buckets of hidden^2 = 16K elements the demo model ran ~100 collectives a step
# and measured 14-25x on Linux 6.18; "auto" now has a floor of 2^20 elements (ds_config.cpp), and
# the same runs measure 2.5-2.9x (2026-11-26).
/usr/bin/python3 - "$quiet1" "$loaded" "$quiet2" "$(nproc)" "$(uname -r)" <<'PY'
import re, sys
q1, loaded, q2, cores, kernel = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", kernel).groups())
eevdf = (major, minor) >= (6, 6)
limit = 4.0
quiet = (q1 + q2) / 2
ratio = loaded / quiet
print(f"quiet step {q1:.1f} / {q2:.1f} ms; with {cores} busy processes {loaded:.1f} ms")
print(f"RESULT under_load_ratio={ratio:.2f} (target <= {limit:.2f}: Linux {kernel}, {'EEVDF' if eevdf else 'CFS'})")
print("OK" if ratio <= limit else "FAILED")
sys.exit(0 if ratio <= limit else 1)
PY
