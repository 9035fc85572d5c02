#!/usr/bin/env bash
# How a run starts, stops and what it leaves behind: the checkpoint at the end of training
# (--save_strategy), --save_total_limit (also with a crash inside a save), Ctrl-C once (finish the
# step, save, exit 130) and twice (exit at once), Ctrl-C through mpirun, output that a log file
# can hold (no progress line glued to log lines), wall_clock_breakdown's timings, non-finite
# values in metrics.jsonl, an eval-only run, and one job per output directory (the lock).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TO_FP32=$ZT_BIN_DIR/tools/zero_to_fp32
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
# The demo model on one rank: zt OUTPUT_DIR [FLAGS...]. Background runs call "$ZEROTRAIN" "${demo[@]}"
# themselves, so that $! is the trainer (not a subshell, which would ignore SIGINT).
demo=(--deepspeed "$ZT_SOURCE_DIR/configs/zero1.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json"
      --train_data "$DATA/train_*.bin" --block_size 64 --per_device_train_batch_size 4 --disable_tqdm)
zt() { "$ZEROTRAIN" "${demo[@]}" --output_dir "$@"; }
checkpoints() { (cd "$1" && ls -d global_step* 2>/dev/null | sort -V | tr '\n' ' '); }

# ---- the end of training saves; --save_strategy no saves nothing ----
if zt "$WORK/end" --max_steps 5 2>"$WORK/end.log" && [[ $(cat "$WORK/end/latest") == global_step5 ]] &&
   [[ $(checkpoints "$WORK/end") == "global_step5 " ]] && "$TO_FP32" "$WORK/end" "$WORK/end_hf" 2>/dev/null &&
   grep -qE 'step 5: saved .*global_step5 \([0-9.]+ MB in' "$WORK/end.log"; then
  pass "training without --save_steps ends with a checkpoint that zero_to_fp32 consolidates"
else
  fail "checkpoint at the end: $(checkpoints "$WORK/end") $(tail -2 "$WORK/end.log")"
fi
if zt "$WORK/nosave" --max_steps 4 --save_strategy no 2>"$WORK/nosave.log" &&
   [[ -z $(checkpoints "$WORK/nosave") && ! -e $WORK/nosave/latest ]]; then
  pass "--save_strategy no writes no checkpoint"
else
  fail "--save_strategy no: $(ls "$WORK/nosave")"
fi
expect_usage_error "--save_strategy no with --save_steps" "save_strategy no saves nothing" \
  zt "$WORK/bad1" --max_steps 4 --save_strategy no --save_steps 2
expect_usage_error "--save_strategy epoch" "save_strategy 'epoch' is not implemented" \
  zt "$WORK/bad2" --max_steps 4 --save_strategy epoch
expect_usage_error "--save_total_limit -1" "save_total_limit must be" zt "$WORK/bad3" --max_steps 4 --save_total_limit -1

# ---- --save_total_limit keeps the newest N, removing older ones only after a new one is published ----
if zt "$WORK/limit" --max_steps 7 --save_steps 2 --save_total_limit 2 2>"$WORK/limit.log" &&
   [[ $(checkpoints "$WORK/limit") == "global_step6 global_step7 " && $(cat "$WORK/limit/latest") == global_step7 ]] &&
   [[ $(grep -c 'removed .*(--save_total_limit 2)' "$WORK/limit.log") -eq 2 ]] &&
   zt "$WORK/limit" --max_steps 9 --save_total_limit 2 --resume_from_checkpoint auto 2>>"$WORK/limit.log" &&
   [[ $(checkpoints "$WORK/limit") == "global_step7 global_step9 " ]]; then
  pass "--save_total_limit 2 keeps the two newest checkpoints, across a resume"
else
  fail "--save_total_limit: $(checkpoints "$WORK/limit") $(tail -2 "$WORK/limit.log")"
fi
# A crash at each of the 12 points of the second save (checkpoint.cpp's crash_point: the shard half
# written, then the shard and model_states.h5 each written and renamed, all ranks durable, then the
# manifest and `latest` each as an empty temporary, written and renamed) with a limit of 1:
# `latest` always names a complete checkpoint that resumes, so the older one was not removed early.
for k in $(seq 13 24); do
  out=$WORK/crash_$k
  ZT_CHECKPOINT_CRASH_AT=$k zt "$out" --max_steps 6 --save_steps 2 --save_total_limit 1 >/dev/null 2>&1
  latest=$(cat "$out/latest" 2>/dev/null)
  if [[ $latest == global_step[24] && -f $out/$latest/manifest.json ]] &&
     zt "$out" --max_steps 6 --save_steps 2 --save_total_limit 1 --resume_from_checkpoint auto 2>"$out.log" &&
     [[ $(checkpoints "$out") == "global_step6 " ]]; then
    pass "crash point $k in a save with --save_total_limit 1: $latest survives and resumes"
  else
    fail "crash point $k: latest '$latest', $(checkpoints "$out") $(tail -2 "$out.log" 2>/dev/null)"
  fi
done

# ---- Ctrl-C ----
# Steps of about a second (micro batch 96), a checkpoint after each, so a signal lands mid-step.
slow=(--per_device_train_batch_size 96 --max_steps 100000 --save_steps 1)
wait_for_checkpoint() { for _ in $(seq 600); do [[ -f $1/latest ]] && return 0; sleep 0.1; done; return 1; }
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/int1" "${slow[@]}" 2>"$WORK/int1.log" &
pid=$!
wait_for_checkpoint "$WORK/int1" && kill -INT $pid
wait $pid
rc=$?
saved=$(grep -o 'checkpoint saved in [^;]*' "$WORK/int1.log" | awk '{print $4}')
if [[ $rc -eq 130 && -n $saved && $saved == "$WORK/int1/$(cat "$WORK/int1/latest")" ]] &&
   grep -q '"event":"interrupted"' "$WORK/int1/metrics.jsonl" &&
   step=$(basename "$saved" | tr -dc 0-9) &&
   zt "$WORK/int1" --per_device_train_batch_size 96 --max_steps $((step + 1)) --resume_from_checkpoint auto 2>"$WORK/int1r.log"; then
  pass "one SIGINT: the step finishes, $(basename "$saved") is saved and named, exit 130, and it resumes"
else
  fail "one SIGINT: exit $rc, saved '$saved', $(tail -3 "$WORK/int1.log")"
fi
# A Ctrl-C before the first step (here during --eval_on_start over the whole eval set) is kept:
# the evaluation and the first step finish, then the save and exit 130.
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/int0" --max_steps 100000 --eval_data "$DATA/val_*.bin" --do_eval \
  --eval_on_start --max_eval_samples 100000 2>"$WORK/int0.log" &
pid=$!
for _ in $(seq 600); do grep -q 'training:' "$WORK/int0.log" && break; sleep 0.05; done
kill -INT $pid
wait $pid
rc=$?
order=$(grep -o 'interrupted: finishing\|step 0: eval_loss\|interrupted (Interrupt) after step [0-9]*' "$WORK/int0.log" | tr '\n' '|')
if [[ $rc -eq 130 && $order == 'interrupted: finishing|step 0: eval_loss|interrupted (Interrupt) after step 1|' &&
      $(cat "$WORK/int0/latest" 2>/dev/null) == global_step1 ]]; then
  pass "SIGINT during the first evaluation: kept until step 1 ends, global_step1 saved, exit 130"
else
  fail "SIGINT during --eval_on_start: exit $rc, order [$order]: $(tail -2 "$WORK/int0.log")"
fi
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/int2" "${slow[@]}" 2>"$WORK/int2.log" &
pid=$!
# The second SIGINT goes as soon as the first is acknowledged, not after a fixed pause: on a fast
# machine the step and the save that the first one asks for can end within 0.3 s.
wait_for_checkpoint "$WORK/int2" && kill -INT $pid &&
  for _ in $(seq 1000); do grep -q 'interrupted: finishing' "$WORK/int2.log" && break; sleep 0.005; done &&
  before=$(cat "$WORK/int2/latest") && start=$(date +%s%N) && kill -INT $pid
wait $pid
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
if [[ $rc -eq 130 && $ms -lt 500 ]] && grep -q 'interrupted again: exiting now, without saving' "$WORK/int2.log" &&
   [[ -f $WORK/int2/$(cat "$WORK/int2/latest")/manifest.json ]]; then
  pass "a second SIGINT exits at once ($ms ms, exit 130); latest ($(cat "$WORK/int2/latest"), was $before) is complete"
else
  fail "two SIGINTs: exit $rc after $ms ms: $(tail -2 "$WORK/int2.log")"
fi
# Under mpirun: Open MPI cannot forward SIGINT (on Ctrl-C it sends SIGCONT, and SIGTERM only after
# odls_base_sigkill_timeout), but it forwards SIGUSR2 at once, which zerotrain takes as an
# interrupt (jobs/train_mpirun.sh turns Ctrl-C into it): every rank finishes the step, they save,
# and the job exits 130.
timeout 120 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$ZEROTRAIN" \
  --deepspeed "$ZT_SOURCE_DIR/configs/zero2.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --output_dir "$WORK/mpi" --block_size 64 "${slow[@]}" >"$WORK/mpi.log" 2>&1 &
pid=$!
wait_for_checkpoint "$WORK/mpi" && sleep 1 && start=$(date +%s) && pkill -USR2 -P $pid -x mpirun  # not timeout(1)
wait $pid
rc=$?
seconds=$(($(date +%s) - start))
if [[ $rc -eq 130 && $seconds -lt 20 ]] && grep -q '"event":"interrupted"' "$WORK/mpi/metrics.jsonl" &&
   grep -q 'checkpoint saved in' "$WORK/mpi.log" && [[ -f $WORK/mpi/$(cat "$WORK/mpi/latest")/manifest.json ]]; then
  pass "SIGUSR2 to mpirun: the ranks finish the step, save ($(cat "$WORK/mpi/latest")) and exit 130 within ${seconds} s"
else
  fail "SIGUSR2 to mpirun: exit $rc after $seconds s: $(tail -3 "$WORK/mpi.log")"
fi
# mpirun gives the ranks' stdout a pty even when its own output is a file: no progress line may
# be drawn there, so the file has no carriage returns or escape sequences.
if [[ -s $WORK/mpi.log ]] && ! grep -q $'\r\|\033' "$WORK/mpi.log"; then
  pass "output under mpirun, redirected to a file: plain lines only"
else
  fail "output under mpirun has a progress line in it: $(grep -c $'\r' "$WORK/mpi.log") carriage returns"
fi
# On a terminal (script(1) gives stderr a pty) the progress line is drawn, and every log line
# clears it first: none starts glued to it.
script -qefc "$(printf '%q ' "$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero0.json" \
  --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/tty" --block_size 64 --per_device_train_batch_size 4 --max_steps 30 --save_strategy no)" \
  "$WORK/tty.typescript" >/dev/null 2>&1
if /usr/bin/python3 - "$WORK/tty.typescript" <<'PY'; then
import re, sys
raw = open(sys.argv[1], "rb").read().decode()
bars = raw.count("[########################] 30/30")
# A log line is "zerotrain: ..." up to its newline; whatever precedes it on its line must be a
# clear of the status line (\r\033[K), never the bar's text.
glued = [m.group(0)[:60] for m in re.finditer(r"\[[#.]{24}\][^\r\n]*zerotrain: ", raw)]
assert bars >= 1, "the progress line was not drawn on a terminal"
assert not glued, glued
assert raw.count("zerotrain: step 30/30") == 1
PY
  pass "on a terminal the progress line is drawn and log lines never glue to it"
else
  fail "progress line on a terminal"
fi

# ---- metrics.jsonl and the log ----
cat >"$WORK/breakdown.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
JSON
"$ZEROTRAIN" --deepspeed "$WORK/breakdown.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --output_dir "$WORK/breakdown" --block_size 64 --max_steps 4 --save_strategy no \
  --disable_tqdm 2>/dev/null
if /usr/bin/python3 - "$WORK/breakdown/metrics.jsonl" <<'PY'; then
import json, sys
steps = [l for l in map(json.loads, open(sys.argv[1])) if l["event"] == "step"]
assert len(steps) == 4
for s in steps:
    parts = s["forward_ms"] + s["backward_ms"] + s["optimizer_step_ms"]
    # step_ms is the whole step; the three parts are inside it (the rest: data, reductions, logging).
    assert parts <= s["step_ms"] and s["optimizer_step_ms"] < s["step_ms"], s
PY
  pass "wall_clock_breakdown adds forward/backward/optimizer_step_ms and keeps step_ms the whole step"
else
  fail "wall_clock_breakdown timings"
fi
# fp16 with an initial loss scale of 2^40 overflows: skipped steps have an infinite gradient norm,
# written as null and listed in "nonfinite"; every line is strict JSON.
cat >"$WORK/overflow.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true, "initial_scale_power": 40},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
JSON
"$ZEROTRAIN" --deepspeed "$WORK/overflow.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --output_dir "$WORK/overflow" --block_size 64 --max_steps 3 --save_strategy no \
  --disable_tqdm 2>/dev/null
if /usr/bin/python3 - "$WORK/overflow/metrics.jsonl" <<'PY'; then
import json, sys
def reject(token): raise ValueError(f"not JSON: {token}")
lines = [json.loads(l, parse_constant=reject) for l in open(sys.argv[1])]
steps = [l for l in lines if l["event"] == "step"]
assert len(steps) == 3 and all(s["skipped"] for s in steps), steps
assert all(s["grad_norm"] is None and s["nonfinite"] == ["grad_norm"] for s in steps), steps
assert all(isinstance(s["loss"], float) for s in steps)
PY
  pass "non-finite values in metrics.jsonl are null and flagged; every line is strict JSON"
else
  fail "non-finite metrics"
fi
# bf16 diverging (lr 1e4, no clipping): with check_grad_overflow (DeepSpeed's default true) a step
# with a non-finite gradient is skipped; with false the run ends with one line saying why.
for check in true false; do
  cat >"$WORK/bf16_$check.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0, "bf16": {"enabled": true, "check_grad_overflow": $check},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e4}}, "zero_optimization": {"stage": 2}}
JSON
  "$ZEROTRAIN" --deepspeed "$WORK/bf16_$check.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --output_dir "$WORK/bf16_$check" --block_size 64 --max_steps 8 \
    --save_strategy no --disable_tqdm 2>"$WORK/bf16_$check.log"
  echo "exit $?" >>"$WORK/bf16_$check.log"
done
if grep -qx 'exit 0' "$WORK/bf16_true.log" && /usr/bin/python3 - "$WORK/bf16_true/metrics.jsonl" <<'PY'; then
import json, sys
steps = [l for l in map(json.loads, open(sys.argv[1])) if l["event"] == "step"]
skipped = [s for s in steps if s["skipped"]]
assert len(steps) == 8 and skipped and all(s["grad_norm"] is None for s in skipped), steps
PY
  pass "bf16.check_grad_overflow true: steps with a non-finite gradient are skipped"
else
  fail "bf16 skip: $(tail -2 "$WORK/bf16_true.log")"
fi
if grep -qx 'exit 1' "$WORK/bf16_false.log" && grep -q 'gradient norm is not finite.*check_grad_overflow: true skips' "$WORK/bf16_false.log"; then
  pass "bf16.check_grad_overflow false: a non-finite gradient ends the run, saying why"
else
  fail "bf16 without the check: $(tail -2 "$WORK/bf16_false.log")"
fi
"$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero0.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --eval_data "$DATA/val_*.bin" --output_dir "$WORK/evalonly" --block_size 64 --do_eval --max_eval_samples 8 \
  2>"$WORK/evalonly.log"
if grep -q 'done in .*: eval_loss [0-9]' "$WORK/evalonly.log" && ! grep -q 'final loss' "$WORK/evalonly.log" &&
   ! grep -q '"loss"' <(grep '"event":"end"' "$WORK/evalonly/metrics.jsonl") &&
   grep -qE 'memory, peak per rank \(max over ranks\): device [0-9.]+ MB, host 0 B' "$WORK/evalonly.log"; then
  pass "an eval-only run reports no training loss; byte counts print as bytes (units: test_human_units)"
else
  fail "eval-only output: $(tail -3 "$WORK/evalonly.log")"
fi
# ---- one job per output directory ----
# A 2-rank job with steps of about a second; a second job on its directory, even with
# --overwrite_output_dir or --resume_from_checkpoint, exits 2 within 5 s naming the directory and
# the holder (rank 0's host and pid); the first finishes untouched and resumes afterwards.
mpi_demo() {
  timeout 120 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$ZEROTRAIN" \
    --deepspeed "$ZT_SOURCE_DIR/configs/zero2.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --block_size 64 --per_device_train_batch_size 96 --disable_tqdm "$@"
}
mpi_demo --output_dir "$WORK/lock" --max_steps 16 --save_steps 8 >"$WORK/lock.log" 2>&1 &
pid=$!
if wait_step "$WORK/lock/metrics.jsonl" 1 60; then
  holder=$(sed -n 's/^host \(.*\), pid \([0-9]*\)$/\1 \2/p' "$WORK/lock/.zerotrain.lock")
  if [[ $(ps -o comm= -p "${holder#* }") == zerotrain && ${holder% *} == $(hostname) ]]; then
    pass "the lock file names the running job's rank 0 ($holder)"
  else
    fail "lock file: '$(cat "$WORK/lock/.zerotrain.lock")'"
  fi
  for extra in --overwrite_output_dir "--resume_from_checkpoint auto" ""; do  # ~2 s each
    start=$(date +%s%N)
    # shellcheck disable=SC2086  # $extra is a flag and its value
    expect_usage_error_mpi "a second job on a running job's --output_dir ${extra:-(no flag)} is refused" \
      "$WORK/lock: --output_dir is in use by another job \(host $(hostname), pid ${holder#* }\)" \
      mpi_demo --output_dir "$WORK/lock" --max_steps 6 $extra
    ms=$((($(date +%s%N) - start) / 1000000))
    ((ms < 5000)) && pass "... and exits within 5 s ($ms ms)" || fail "the second job took $ms ms"
  done
else
  fail "the first job did not start: $(tail -3 "$WORK/lock.log")"
fi
wait $pid
rc=$?
if [[ $rc -eq 0 ]] && /usr/bin/python3 - "$WORK/lock/metrics.jsonl" <<'PY' &&
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
steps = [e["step"] for e in events if e["event"] == "step"]
assert steps == list(range(1, 17)), steps
assert [e["event"] for e in events].count("start") == 1
PY
   mpi_demo --output_dir "$WORK/lock" --max_steps 18 --resume_from_checkpoint auto >"$WORK/lock2.log" 2>&1 &&
   grep -q '"event":"step","step":18' "$WORK/lock/metrics.jsonl"; then
  pass "the first job finishes with one run's metrics, and its checkpoint resumes once it has ended"
else
  fail "the first job: exit $rc: $(tail -2 "$WORK/lock.log") $(tail -2 "$WORK/lock2.log" 2>/dev/null)"
fi
# kill -9 leaves the lock file but not the lock; a directory holding only the file counts as empty.
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/killed" --max_steps 400 --save_steps 1 >/dev/null 2>&1 &
pid=$!
wait_step "$WORK/killed/metrics.jsonl" 2 60
kill -9 $pid
wait $pid 2>/dev/null
mkdir -p "$WORK/only_lock" && : >"$WORK/only_lock/.zerotrain.lock"
killed_at=$(sed 's/^global_step//' "$WORK/killed/latest" 2>/dev/null)
if zt "$WORK/killed" --max_steps $((killed_at + 2)) --resume_from_checkpoint auto 2>"$WORK/killed.log" &&
   zt "$WORK/only_lock" --max_steps 2 2>"$WORK/only_lock.log"; then
  pass "after kill -9 the directory resumes at once; a directory holding only the lock file is empty"
else
  fail "after kill -9: $(tail -1 "$WORK/killed.log") / $(tail -1 "$WORK/only_lock.log")"
fi
finish
