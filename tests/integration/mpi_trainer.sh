#!/usr/bin/env bash
# zerotrain under mpirun: the trainer's losses at 2 and 4 ranks, every stage, equal the one-rank
# run of the same global batch; ZeRO inference (--do_eval at stage 3, no training) gives the
# one-rank eval loss; a rank that throws mid-step ends every rank, non-zero, within 30 s.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null

# zt NP STAGE OUT ARGS...: a run with a global batch of 8 sequences (MPIRUN_X: more mpirun flags).
zt() {
  local np=$1 stage=$2 out=$3
  shift 3
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 timeout 300 mpirun -np "$np" --oversubscribe -x OMP_NUM_THREADS ${MPIRUN_X:-} "$ZEROTRAIN" \
    --deepspeed "$ZT_SOURCE_DIR/configs/zero$stage.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --eval_data "$DATA/val_*.bin" --output_dir "$out" --block_size 64 \
    --learning_rate 2e-3 --warmup_steps 2 --seed 11 --max_eval_samples 64 --disable_tqdm "$@" 2>"$out.log"
}
compare() {  # compare NAME REFERENCE_METRICS METRICS
  /usr/bin/python3 - "$2" "$3" <<'PY'
import json, sys
def losses(p): return [l["loss"] for l in map(json.loads, open(p)) if l["event"] == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"max relative loss difference {worst:.2e}")
assert worst < 1e-5, worst
PY
}

zt 1 0 "$WORK/ref" --max_steps 12 --per_device_train_batch_size 8 || fail "reference run: $(tail -2 "$WORK/ref.log")"
for np in 2 4; do
  for stage in 0 1 2 3; do
    out=$WORK/np${np}_s$stage
    accum=$((stage % 2 + 1))  # stages 1 and 3 also split the batch into 2 micro-steps
    if zt "$np" "$stage" "$out" --max_steps 12 --per_device_train_batch_size $((8 / np / accum)) \
         --gradient_accumulation_steps $accum; then
      compare x "$WORK/ref/metrics.jsonl" "$out/metrics.jsonl" && pass "np $np stage $stage (accumulation $accum) matches one rank" \
        || fail "np $np stage $stage losses differ"
    else
      fail "np $np stage $stage: $(tail -2 "$out.log")"
    fi
  done
done

# The shared-memory collectives (ZT_SHM_COLLECTIVES=1): the gradients (stage 0) and the buckets
# (stage 2) sit in the node's shared memory and are reduced in place, the trainer says so, and the
# losses are the one-rank run's.
for stage in 0 2; do
  out=$WORK/shm_s$stage
  if MPIRUN_X="-x ZT_SHM_COLLECTIVES=1" zt 2 "$stage" "$out" --max_steps 12 --per_device_train_batch_size 4; then
    grep -q "shared memory, which the all-reduce and reduce-scatter read in place" "$out.log" \
      && pass "stage $stage with ZT_SHM_COLLECTIVES=1: gradients in shared memory" \
      || fail "stage $stage with ZT_SHM_COLLECTIVES=1: no shared-memory gradients in the log: $(grep gradients "$out.log")"
    compare x "$WORK/ref/metrics.jsonl" "$out/metrics.jsonl" && pass "stage $stage in shared memory matches one rank" \
      || fail "stage $stage in shared memory: losses differ"
  else
    fail "stage $stage with ZT_SHM_COLLECTIVES=1: $(tail -2 "$out.log")"
  fi
done

/usr/bin/python3 - "$WORK/np2_s3/metrics.jsonl" <<'PY' && pass "stage 3 metrics: bytes per rank, live parameters" || fail "stage 3 metrics"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
start = lines[0]
assert start["world_size"] == 2 and start["stage"] == 3
msb = start["model_state_bytes"]
psi = start["num_params"]
assert abs(sum(msb.values()) - 16 * psi / 2) < 0.02 * 16 * psi / 2, msb  # fp32: 4+4+4+4 bytes over 2 ranks
step = [l for l in lines if l["event"] == "step"][-1]
assert step["live_parameters_peak"] > 0 and step["comm_bytes"]["all_gather"] > 0, step
PY

# ZeRO inference: forward only at stage 3, gathering as training does.
zt 1 0 "$WORK/eval1" --max_steps 0 --do_eval || fail "eval one rank: $(tail -2 "$WORK/eval1.log")"
zt 2 3 "$WORK/eval3" --max_steps 0 --do_eval || fail "eval stage 3: $(tail -2 "$WORK/eval3.log")"
/usr/bin/python3 - "$WORK/eval1/metrics.jsonl" "$WORK/eval3/metrics.jsonl" <<'PY' && pass "stage 3 inference gives the one-rank eval loss" || fail "stage 3 inference"
import json, sys
def ev(p): return [l["eval_loss"] for l in map(json.loads, open(p)) if l["event"] == "eval"]
a, b = ev(sys.argv[1]), ev(sys.argv[2])
print("eval_loss", a, b)
assert len(a) == len(b) == 1 and abs(a[0] - b[0]) < 1e-5 * a[0], (a, b)
PY

# A rank that throws mid-step: every rank ends, non-zero, well within 30 s, naming the rank.
start=$(date +%s)
OMP_NUM_THREADS=1 timeout 60 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS -x ZT_FAULT_RANK=1 -x ZT_FAULT_STEP=3 \
  "$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero2.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --output_dir "$WORK/fault" --block_size 64 --max_steps 50 \
  --per_device_train_batch_size 4 --disable_tqdm >"$WORK/fault.out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
if [[ $rc -ne 0 && $rc -ne 124 && $elapsed -le 30 ]] && grep -q "rank 1: .*injected fault at step 3" "$WORK/fault.out"; then
  pass "a failing rank ends the job: exit $rc after ${elapsed}s"
else
  fail "failing rank: exit $rc after ${elapsed}s: $(tail -3 "$WORK/fault.out")"
fi
if pgrep -f "$WORK/fault" >/dev/null; then fail "processes left behind"; else pass "no process left behind"; fi
finish
