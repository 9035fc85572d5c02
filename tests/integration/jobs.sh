#!/usr/bin/env bash
# The jobs/ scripts as a new user meets them, outside Slurm (tests/integration/slurm.sh runs
# train_slurm.sbatch, consolidate.sh and estimate.sh as Slurm jobs):
#  - every script answers --help with its header, which names every ZT_ setting it reads;
#  - quickstart.sh, then train_mpirun.sh, consolidate.sh and estimate.sh with their defaults
#    (only ZT_OUT set, to keep the outputs here): the demo trains, train_mpirun.sh trains on the
#    demo's data, and a second run resumes; arguments pass through to the program;
#  - a wrong setting or flag is one line within seconds, not after mpirun's grace;
#  - ZT_GPUS_PER_NODE: the launch commands both training scripts print with ZT_DRY_RUN=1 (one
#    rank per GPU, NCCL_*/CUDA_*/ZT_* passed on, --accelerator cuda), its bad values, and a run
#    of train_mpirun.sh with a stand-in zerotrain that prints what each rank got;
#  - gpu_smoke.sh's verdicts on a stand-in build, with and without a stand-in nvidia-smi;
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
  grep -q 'lib/programs.sh' "$script" && sources+=("$JOBS/lib/programs.sh")
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
expect_usage_error "install_deps.sh --list with an unknown group" "^install_deps: unknown group 'nope'" \
  "$JOBS/install_deps.sh" --list nope
# The runtime list is what the programs load (the .deb's Depends): after install_deps.sh, every
# name in it is an installed package here (a misspelt name would make the .deb uninstallable).
runtime=$("$JOBS/install_deps.sh" --list runtime)
not_installed=$(for p in $runtime; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
if [[ $(wc -w <<<"$runtime") -ge 10 && -z $not_installed ]]; then
  pass "install_deps.sh --list runtime: $(wc -w <<<"$runtime") packages, each installed here"
else
  fail "install_deps.sh --list runtime: '$runtime', not installed:$not_installed"
fi

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
   ! grep -E ': line [0-9]+: ' "$WORK/last.log" &&  # no stray shell error on a first run (issue 29)
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
if /usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['estimate']['config'] == 'stage 2, fp32, AdamW', d['estimate']" \
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

# ---- GPUs per node: the launch command (ZT_DRY_RUN=1), the settings' errors, the environment ----
gpu_env=(env ZT_HOME="$ZT_SOURCE_DIR" ZT_TRAIN_DATA="$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,1)
elapsed "${gpu_env[@]}" ZT_GPUS_PER_NODE=2 ZT_DRY_RUN=1 "$JOBS/train_mpirun.sh" --max_steps 7
line=$(tail -n 1 "$WORK/last.log")
if [[ $rc -eq 0 && $line == "mpirun -np 2 "* && $line == *" -x NCCL_DEBUG "* && $line == *" -x CUDA_VISIBLE_DEVICES "* &&
      $line == *" -x ZT_GPUS_PER_NODE "* && $line == *" --accelerator cuda --max_steps 7" && $line != *npernode* ]]; then
  pass "train_mpirun.sh ZT_GPUS_PER_NODE=2 (dry run): 2 ranks, -x for NCCL_*, CUDA_* and ZT_*, --accelerator cuda"
else
  fail "train_mpirun.sh GPUs dry run: exit $rc: $line"
fi
elapsed "${gpu_env[@]}" ZT_GPUS_PER_NODE=4 ZT_HOSTFILE=$WORK/hosts ZT_DRY_RUN=1 "$JOBS/train_mpirun.sh" --accelerator emulated
line=$(tail -n 1 "$WORK/last.log")
if [[ $rc -eq 0 && $line == "mpirun --npernode 4 "* && $line == *" --hostfile $WORK/hosts "* && $line != *" -np "* &&
      $line == *" --accelerator emulated"* && $line != *"accelerator cuda"* ]]; then
  pass "with a hostfile: --npernode 4 on every host, no -np; the user's --accelerator wins"
else
  fail "train_mpirun.sh GPUs + hostfile dry run: exit $rc: $line"
fi
elapsed "${gpu_env[@]}" ZT_GPUS_PER_NODE=3 ZT_HOSTFILE=$WORK/hosts ZT_RANKS=6 ZT_DRY_RUN=1 "$JOBS/train_mpirun.sh"
if [[ $rc -eq 0 && $(tail -n 1 "$WORK/last.log") == "mpirun -np 6 --npernode 3 "* ]]; then
  pass "ZT_RANKS with a hostfile caps the total: -np 6 --npernode 3"
else
  fail "ZT_RANKS + GPUs: exit $rc: $(tail -n 1 "$WORK/last.log")"
fi
elapsed "${gpu_env[@]}" ZT_GPUS_PER_NODE=2 SLURM_JOB_NUM_NODES=3 ZT_DRY_RUN=1 "$JOBS/train_slurm.sbatch"
line=$(tail -n 1 "$WORK/last.log")
if [[ $rc -eq 0 && $line == "OMP_NUM_THREADS=1 srun --export=ALL --kill-on-bad-exit=1 --mpi=pmix --nodes=3 --ntasks=6 --ntasks-per-node=2 --gpus-per-node=2 "* &&
      $line == *" --accelerator cuda" ]]; then
  pass "train_slurm.sbatch ZT_GPUS_PER_NODE=2 on 3 nodes (dry run): srun --export=ALL, 6 tasks, 2 per node, --gpus-per-node=2, --accelerator cuda"
else
  fail "train_slurm.sbatch GPUs dry run: exit $rc: $line"
fi
elapsed "${gpu_env[@]}" SLURM_GPUS_PER_NODE=h100:4 ZT_DRY_RUN=1 "$JOBS/train_slurm.sbatch"
if [[ $rc -eq 0 && $(tail -n 1 "$WORK/last.log") == *" --nodes=1 --ntasks=4 --ntasks-per-node=4 --gpus-per-node=4 "* ]]; then
  pass "train_slurm.sbatch in a job submitted with --gpus-per-node=h100:4: 4 tasks"
else
  fail "train_slurm.sbatch SLURM_GPUS_PER_NODE: exit $rc: $(tail -n 1 "$WORK/last.log")"
fi
for bad in 0 two -1 "2 4"; do
  expect_usage_error "train_mpirun.sh ZT_GPUS_PER_NODE='$bad'" "^train_mpirun: ZT_GPUS_PER_NODE must be a positive number, got '$bad'$" \
    env ZT_GPUS_PER_NODE="$bad" "$JOBS/train_mpirun.sh"
  expect_usage_error "train_slurm.sbatch ZT_GPUS_PER_NODE='$bad'" "^train_slurm: ZT_GPUS_PER_NODE must be a positive number, got '$bad'$" \
    env ZT_HOME="$ZT_SOURCE_DIR" ZT_GPUS_PER_NODE="$bad" "$JOBS/train_slurm.sbatch"
done
expect_usage_error "train_slurm.sbatch with two GPU types per node" \
  "^train_slurm: SLURM_GPUS_PER_NODE \(sbatch --gpus-per-node\) is 'a100:2,v100:2', not one count: set ZT_GPUS_PER_NODE$" \
  env ZT_HOME="$ZT_SOURCE_DIR" SLURM_GPUS_PER_NODE=a100:2,v100:2 "$JOBS/train_slurm.sbatch"
expect_usage_error "train_mpirun.sh ZT_DRY_RUN=yes" "^train_mpirun: ZT_DRY_RUN must be 0 or 1, got 'yes'$" \
  env ZT_DRY_RUN=yes "$JOBS/train_mpirun.sh"
# The command runs: mpirun takes the flags, and every rank gets the caller's NCCL and CUDA
# settings and --accelerator cuda (a stand-in zerotrain that prints them).
mkdir -p "$WORK/fakebin/src"
cat >"$WORK/fakebin/src/zerotrain" <<'SH'
#!/bin/sh
echo "rank $OMPI_COMM_WORLD_RANK local $OMPI_COMM_WORLD_LOCAL_RANK NCCL_DEBUG=$NCCL_DEBUG CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES args $*"
SH
chmod +x "$WORK/fakebin/src/zerotrain"
elapsed "${gpu_env[@]}" ZT_BIN="$WORK/fakebin" ZT_GPUS_PER_NODE=2 ZT_OUTPUT_DIR="$WORK/fake" "$JOBS/train_mpirun.sh"
if [[ $rc -eq 0 && $(grep -c "NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,1 args .*--accelerator cuda" "$WORK/last.log") -eq 2 ]] &&
   grep -q "^rank 1 local 1 " "$WORK/last.log"; then
  pass "train_mpirun.sh ZT_GPUS_PER_NODE=2 runs 2 ranks (local ranks 0 and 1) with NCCL_DEBUG, CUDA_VISIBLE_DEVICES unchanged, --accelerator cuda"
else
  fail "train_mpirun.sh GPUs run: exit $rc: $(tail -n 3 "$WORK/last.log")"
fi

# ---- gpu_smoke.sh, without a GPU or a CUDA build: its options, and its verdicts on a stand-in build
# (a gpu test that skips, one that passes, a benchmark) with and without a stand-in nvidia-smi ----
expect_usage_error "gpu_smoke.sh --jobs 0" "^gpu_smoke: --jobs must be a positive number, got '0'$" "$JOBS/gpu_smoke.sh" --jobs 0
expect_usage_error "gpu_smoke.sh --skip-build without a build" "^gpu_smoke: --skip-build: no build in $WORK/nobuild " \
  "$JOBS/gpu_smoke.sh" --skip-build --build-dir "$WORK/nobuild"
mkdir -p "$WORK/smoke_src" "$WORK/smi"
cat >"$WORK/smoke_src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(smoke NONE)
enable_testing()
add_test(NAME gpu_skips COMMAND sh -c "echo 'skipped: no usable GPU'; exit 77")
add_test(NAME gpu_passes COMMAND true)
set_tests_properties(gpu_skips gpu_passes PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
CMAKE
cmake -S "$WORK/smoke_src" -B "$WORK/smoke" >/dev/null
mkdir -p "$WORK/smoke/tests/bench"
printf '#!/bin/sh\necho "bench_gpu_adam: 1234.5 GB/s"\n' >"$WORK/smoke/tests/bench/bench_gpu_adam"
printf '#!/bin/sh\ncase $1 in -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;; *) echo "name, memory.total [MiB], driver_version"; echo "Stand-in GPU, 1024 MiB, 1.0" ;; esac\n' \
  >"$WORK/smi/nvidia-smi"
chmod +x "$WORK/smoke/tests/bench/bench_gpu_adam" "$WORK/smi/nvidia-smi"
elapsed env PATH="$WORK/smi:$PATH" "$JOBS/gpu_smoke.sh" --no-install --skip-build --build-dir "$WORK/smoke"
if [[ $rc -eq 1 && $(tail -n 1 "$WORK/last.log") == FAILED ]] &&
   grep -q "ctest -L gpu *FAILED (1 of 2 skipped although nvidia-smi shows a GPU)" "$WORK/last.log" &&
   grep -q "^bench_gpu_adam: 1234.5 GB/s" "$WORK/last.log" && grep -q "bench_gpu_nccl *absent" "$WORK/last.log" &&
   grep -q "^Stand-in GPU, 1024 MiB, 1.0" "$WORK/last.log"; then
  pass "gpu_smoke.sh with a GPU: a skipped gpu test fails it; the benchmark's figures, absent ones named, nvidia-smi's line"
else
  fail "gpu_smoke.sh with a stand-in GPU: exit $rc: $(tail -n 9 "$WORK/last.log")"
fi
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "note: this machine has a GPU; gpu_smoke.sh's verdict without one is not checked"
else
  elapsed "$JOBS/gpu_smoke.sh" --no-install --skip-build --build-dir "$WORK/smoke"
  if [[ $rc -eq 77 && $(tail -n 1 "$WORK/last.log") == "SKIPPED: no GPU, nothing ran on one" ]] &&
     grep -q "ctest -L gpu *skipped (1 of 2: no GPU)" "$WORK/last.log" && grep -q "bench_gpu_adam *skipped (no GPU)" "$WORK/last.log"; then
    pass "gpu_smoke.sh without a GPU: the skip is no failure, the benchmark not run, exit 77 (skipped)"
  else
    fail "gpu_smoke.sh without a GPU: exit $rc: $(tail -n 9 "$WORK/last.log")"
  fi
fi

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
