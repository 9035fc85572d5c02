#!/usr/bin/env bash
# The jobs/ scripts as a new user meets them, outside Slurm (tests/integration/slurm.sh runs
# train_slurm.sbatch, consolidate.sh and estimate.sh as Slurm jobs):
#  - every script answers --help with its header, which names every ZT_ setting it reads;
#  - quickstart.sh, then train_mpirun.sh, consolidate.sh and estimate.sh with their defaults
#    (only ZT_OUT set, to keep the outputs here): the demo trains, train_mpirun.sh trains on the
#    demo's data, and a second run resumes; arguments pass through to the program;
#  - a wrong setting or flag is one line within seconds, not after mpirun's grace;
#  - Ctrl-C on a terminal (a pty): once saves and exits 130, twice exits at once; SIGTERM to the
#    script saves and exits 0; SIGTERM to mpirun itself with ZT_GRACE saves too;
#  - a rank killed mid-run ends the job within seconds, naming the rank, latest intact.
source "$(dirname "$0")/lib.sh"

JOBS=$ZT_SOURCE_DIR/jobs
export ZT_OUT=$WORK/out
# The scripts' default build is build/release, which is what ctest runs under the release preset;
# under another preset, point them at the build under test (quickstart.sh then builds nothing).
[[ $ZT_BIN_DIR -ef $ZT_SOURCE_DIR/build/release ]] || export ZT_BIN=$ZT_BIN_DIR
trap 'pkill -KILL -f "zerotrain .*$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
# elapsed CMD...: runs CMD with its stdout and stderr in $WORK/last.log; sets rc and secs.
elapsed() {
  local start=$SECONDS
  "$@" >"$WORK/last.log" 2>&1
  rc=$?
  secs=$((SECONDS - start))
}
last_event() { tail -n 1 "$1/metrics.jsonl" 2>/dev/null | grep -o '"event":"[a-z]*"' | cut -d'"' -f4; }

# ---- --help ----
for script in "$JOBS"/*.sh "$JOBS"/*.sbatch; do
  name=$(basename "$script")
  help=$("$script" --help 2>&1)
  hrc=$?
  # Every ZT_ setting the script (and what it sources from jobs/lib) reads ($ZT_X, ${ZT_X...}).
  sources=("$script")
  grep -q 'lib/train_args.sh' "$script" && sources+=("$JOBS/lib/train_args.sh" "$JOBS/lib/flags.sh")
  grep -q 'lib/flags.sh' "$script" && sources+=("$JOBS/lib/flags.sh")
  missing=""
  for var in $(grep -hv '^\s*#' "${sources[@]}" | grep -o '\${\?ZT_[A-Z_]*' | tr -d '${' | sort -u); do
    grep -q "$var" <<<"$help" || missing+=" $var"
  done
  if [[ $hrc -eq 0 && $(head -1 <<<"$help") =~ [a-z] && -z $missing && $help != *'#'SBATCH* ]]; then
    pass "$name --help: its header, every ZT_ setting named"
  else
    fail "$name --help: exit $hrc, settings not in the help:${missing:-none}; $(head -2 <<<"$help")"
  fi
done
elapsed "$JOBS/install_deps.sh"
if [[ $rc -eq 0 ]]; then pass "install_deps.sh: nothing missing, exit 0"; else fail "install_deps.sh: exit $rc: $(tail -2 "$WORK/last.log")"; fi
expect_usage_error "install_deps.sh with an unknown argument" "^install_deps: unknown argument '--bogus'" \
  "$JOBS/install_deps.sh" --bogus

# ---- before the demo: a pointer to it, at once ----
elapsed "$JOBS/train_mpirun.sh"
if [[ $rc -eq 2 && $secs -le 5 && $(wc -l <"$WORK/last.log") -eq 1 ]] &&
   grep -q "^train_mpirun: ZT_TRAIN_DATA: no file matches $ZT_OUT/data/train_\*.bin (run jobs/quickstart.sh" "$WORK/last.log"; then
  pass "train_mpirun.sh before any data: one line naming ZT_TRAIN_DATA and quickstart.sh, exit 2, ${secs} s"
else
  fail "train_mpirun.sh without data: exit $rc after $secs s: $(cat "$WORK/last.log")"
fi
expect_usage_error "consolidate.sh before any run" "^zero_to_fp32: error: .*$ZT_OUT/mpirun" "$JOBS/consolidate.sh"

# ---- the demo, then each script with its defaults ----
elapsed "$JOBS/quickstart.sh"
qs=$ZT_OUT/quickstart
if [[ $rc -eq 0 && $(cat "$qs/latest" 2>/dev/null) == global_step300 && $(last_event "$qs") == end ]] &&
   grep -q '"event":"eval"' "$qs/metrics.jsonl" && grep -q '^next: *jobs/train_mpirun.sh' "$WORK/last.log" &&
   [[ -x $ZT_BIN_DIR/tools/zero_to_fp32 && -x $ZT_BIN_DIR/tools/zero_estimate && -x $ZT_BIN_DIR/tools/zero_prepare_data ]]; then
  pass "quickstart.sh: every tool built, 300 steps with eval, checkpoint global_step300, next steps printed (${secs} s)"
else
  fail "quickstart.sh: exit $rc: $(tail -4 "$WORK/last.log")"
fi
cp "$WORK/last.log" "$WORK/quickstart.log"
run=$ZT_OUT/mpirun
elapsed "$JOBS/train_mpirun.sh"
if [[ $rc -eq 0 && $(cat "$run/latest" 2>/dev/null) == global_step300 && $(last_event "$run") == end ]] &&
   grep -q "^train_mpirun: done: outputs in $run" "$WORK/last.log"; then
  pass "train_mpirun.sh with its defaults after quickstart.sh: its data, 300 steps, checkpoint global_step300 (${secs} s)"
else
  fail "train_mpirun.sh defaults: exit $rc: $(tail -3 "$WORK/last.log")"
fi
elapsed "$JOBS/train_mpirun.sh" --max_steps 310 --save_steps 5
if [[ $rc -eq 0 && $(cat "$run/latest" 2>/dev/null) == global_step310 ]] &&
   grep -q "^train_mpirun: resuming from $run/global_step300" "$WORK/last.log" && [[ -d $run/global_step305 ]]; then
  pass "train_mpirun.sh again, --max_steps 310 --save_steps 5 passed through: resumes from global_step300, saves 305 and 310"
else
  fail "train_mpirun.sh resume: exit $rc: $(tail -3 "$WORK/last.log")"
fi
elapsed "$JOBS/consolidate.sh"
if [[ $rc -eq 0 && -s $run/hf/model.safetensors && -s $run/hf/config.json ]] && grep -q "global_step310" "$WORK/last.log"; then
  pass "consolidate.sh with its defaults: train_mpirun.sh's global_step310 -> $run/hf"
else
  fail "consolidate.sh: exit $rc: $(tail -2 "$WORK/last.log")"
fi
expect_usage_error "consolidate.sh into an existing export" "already exists; pass --overwrite" "$JOBS/consolidate.sh"
elapsed "$JOBS/consolidate.sh" --overwrite --dtype bf16
if [[ $rc -eq 0 ]] && grep -q "bf16" "$WORK/last.log" && grep -q '"torch_dtype":"bfloat16"' "$run/hf/config.json"; then
  pass "consolidate.sh --overwrite --dtype bf16: arguments reach zero_to_fp32 (and win over ZT_DTYPE's default)"
else
  fail "consolidate.sh --overwrite: exit $rc: $(tail -2 "$WORK/last.log")"
fi
elapsed "$JOBS/estimate.sh"
if [[ $rc -eq 0 ]] && grep -q '^  per CPU  |  per GPU |   Options' "$WORK/last.log" && grep -q '124M total params' "$WORK/last.log"; then
  pass "estimate.sh with its defaults: DeepSpeed's table for GPT-2 124M"
else
  fail "estimate.sh: exit $rc: $(tail -2 "$WORK/last.log")"
fi
"$JOBS/estimate.sh" --stage 2 --json >"$WORK/estimate.json" 2>&1
if /usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['estimate']['config'] == 'stage 2, fp32', d['estimate']" \
     "$WORK/estimate.json" 2>"$WORK/estimate.err"; then
  pass "estimate.sh --stage 2 --json: arguments reach zero_estimate, in place of the script's --stage 3"
else
  fail "estimate.sh --json: $(tail -2 "$WORK/estimate.err") $(head -c 300 "$WORK/estimate.json")"
fi

# ---- errors are prompt ----
elapsed "$JOBS/train_mpirun.sh" --no_such_flag
if [[ $rc -eq 2 && $secs -le 30 ]] && grep -q "^zerotrain: error: unknown flag --no_such_flag" "$WORK/last.log"; then
  pass "train_mpirun.sh --no_such_flag: zerotrain's one line, exit 2, ${secs} s"
else
  fail "train_mpirun.sh bad flag: exit $rc after $secs s: $(grep zerotrain "$WORK/last.log")"
fi
expect_usage_error "train_mpirun.sh with a missing ZT_CONFIG" "^train_mpirun: ZT_CONFIG: no such file: /nonexistent.json" \
  env ZT_CONFIG=/nonexistent.json "$JOBS/train_mpirun.sh"

# ---- stopping ----
shape=(--logging_steps 1 --save_steps 100000 --per_device_train_batch_size 32 --block_size 128)
slow=("${shape[@]}" --max_steps 100000)
stop_run=$ZT_OUT/stop1
read -r code secs < <(ZT_OUTPUT_DIR=$stop_run /usr/bin/python3 "$ZT_SOURCE_DIR/tests/integration/ctrl_c.py" \
  "$stop_run/metrics.jsonl" 1 "$WORK/ctrl_c1.log" "$JOBS/train_mpirun.sh" "${slow[@]}")
saved=$(cat "$stop_run/latest" 2>/dev/null)
if [[ $code == 130 && $(last_event "$stop_run") == interrupted && -f $stop_run/$saved/manifest.json ]] &&
   grep -q "^train_mpirun: stopped after saving $stop_run/$saved; run again to continue" "$WORK/ctrl_c1.log"; then
  pass "Ctrl-C on the terminal: every rank finishes its step, $saved is saved and named, exit 130 (${secs} s)"
else
  fail "Ctrl-C once: exit [$code], saved [$saved]: $(tail -3 "$WORK/ctrl_c1.log")"
fi
# What the last run wrote decides how the script reports it, not an older line: after the
# interrupted run above, a run that fails before writing anything is a failure.
elapsed env ZT_OUTPUT_DIR="$stop_run" "$JOBS/train_mpirun.sh" --no_such_flag
if [[ $rc -eq 2 ]] && ! grep -q "stopped after saving" "$WORK/last.log"; then
  pass "a failing run after an interrupted one: exit 2, not taken for the earlier stop"
else
  fail "a failing run after an interrupted one: exit $rc: $(grep train_mpirun "$WORK/last.log")"
fi
stop_run=$ZT_OUT/stop2
read -r code secs < <(ZT_OUTPUT_DIR=$stop_run /usr/bin/python3 "$ZT_SOURCE_DIR/tests/integration/ctrl_c.py" \
  "$stop_run/metrics.jsonl" 2 "$WORK/ctrl_c2.log" "$JOBS/train_mpirun.sh" "${slow[@]}")
if [[ $code == 130 && ${secs%.*} -lt 10 ]] && ! pgrep -f "zerotrain .*$stop_run" >/dev/null &&
   { [[ ! -e $stop_run/latest ]] || [[ -f $stop_run/$(cat "$stop_run/latest")/manifest.json ]]; }; then
  pass "Ctrl-C twice: exit 130 ${secs} s after the second, no rank left, no half checkpoint published"
else
  fail "Ctrl-C twice: exit [$code] after [$secs] s: $(tail -3 "$WORK/ctrl_c2.log")"
fi
stop_run=$ZT_OUT/stop3
ZT_OUTPUT_DIR=$stop_run "$JOBS/train_mpirun.sh" "${slow[@]}" >"$WORK/term.log" 2>&1 &
script_pid=$!
wait_step "$stop_run/metrics.jsonl" 1 120
kill -TERM $script_pid
start=$SECONDS
wait $script_pid
rc=$?
secs=$((SECONDS - start))
saved=$(cat "$stop_run/latest" 2>/dev/null)
if [[ $rc -eq 0 && $(last_event "$stop_run") == preempted && -f $stop_run/$saved/manifest.json && $secs -le 30 ]]; then
  pass "SIGTERM to train_mpirun.sh: a preemption, $saved saved, exit 0 (${secs} s)"
else
  fail "SIGTERM to the script: exit $rc after $secs s, saved [$saved]: $(tail -3 "$WORK/term.log")"
fi
# A rank that dies (SIGKILL after step 7, checkpoints every 5): the job ends within seconds,
# non-zero, mpirun names the lost rank, and latest is a complete checkpoint.
stop_run=$ZT_OUT/dead
ZT_RANKS=2 ZT_OUTPUT_DIR=$stop_run "$JOBS/train_mpirun.sh" --logging_steps 1 --max_steps 100000 --save_steps 5 \
  >"$WORK/dead.log" 2>&1 &
script_pid=$!
wait_step "$stop_run/metrics.jsonl" 7 300
pkill -KILL -n -f "^[^ ]*/src/zerotrain .*$stop_run"
start=$SECONDS
wait $script_pid
rc=$?
secs=$((SECONDS - start))
saved=$(cat "$stop_run/latest" 2>/dev/null)
if [[ $rc -ne 0 && $secs -lt 60 && -n $saved && -f $stop_run/$saved/manifest.json ]] &&
   grep -q 'process rank [01] .* exited on signal 9' "$WORK/dead.log"; then
  pass "a rank killed after step 7: the job ends in ${secs} s, exit $rc, the lost rank named, latest $saved complete"
else
  fail "a dead rank: exit $rc after $secs s, latest [$(cat "$stop_run/latest" 2>/dev/null)]: $(tail -n 3 "$WORK/dead.log")"
fi
# SIGTERM to mpirun itself, as a batch system that signals every process might: with ZT_GRACE
# mpirun waits that long before it kills the ranks, which take the SIGTERM for a preemption.
# (mpirun waits out the whole grace before it exits, so keep it short.)
stop_run=$ZT_OUT/stop4
ZT_GRACE=15 ZT_RANKS=2 ZT_OUTPUT_DIR=$stop_run "$JOBS/train_mpirun.sh" "${slow[@]}" >"$WORK/grace.log" 2>&1 &
script_pid=$!
wait_step "$stop_run/metrics.jsonl" 1 120
pkill -TERM -f "^mpirun .*$stop_run"
wait $script_pid
first=$?
stopped=$(grep -o '"event":"preempted","step":[0-9]*' "$stop_run/metrics.jsonl" | grep -o '[0-9]*$')
ZT_RANKS=2 ZT_OUTPUT_DIR=$stop_run "$JOBS/train_mpirun.sh" "${shape[@]}" --max_steps $((${stopped:-0} + 2)) >"$WORK/grace2.log" 2>&1
second=$?
if [[ $first -eq 0 && -n $stopped && $second -eq 0 ]] && grep -q 'stopped after saving' "$WORK/grace.log" &&
   grep -q "resuming from .*global_step$stopped" "$WORK/grace2.log"; then
  pass "SIGTERM to mpirun with ZT_GRACE=15: checkpoint at step $stopped, exit 0; run again -> resumes from it"
else
  fail "SIGTERM to mpirun: exits $first/$second, stopped at [$stopped]; $(tail -n 3 "$WORK/grace.log" "$WORK/grace2.log" 2>&1)"
fi
finish
