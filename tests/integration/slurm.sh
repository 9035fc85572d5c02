#!/usr/bin/env bash
# The job scripts on a real Slurm cluster started here (ctest/local_slurm.sh: Debian's slurmctld,
# slurmd and munge), at one node and at two simulated nodes:
#  - train_slurm.sbatch with its defaults trains on quickstart's data (ZT_OUT/data); with
#    settings it trains, saves and exits 0; consolidate.sh and estimate.sh run as jobs
#    (tests/integration/jobs.sh has the scripts outside Slurm);
#  - ZT_GPUS_PER_NODE in an allocation (the srun command, dry run: the cluster has no GPUs), and
#    NCCL_* and the script's OMP_NUM_THREADS reaching every task of a job submitted with --export=LIST;
#  - preemption at several steps: scancel --signal=TERM -> checkpoint, exit 0 -> scontrol requeue
#    -> the job resumes and finishes with the losses of an uninterrupted run, step for step;
#  - SIGKILL of one rank at a random step (several seeds): the job ends non-zero within 60 s,
#    srun names the lost task, and `latest` still loads;
#  - two nodes with node-local checkpoints: each node holds its own shards, and a second job
#    resumes from them; with shared storage the checkpoint consolidates.
# Every sbatch and wait is bounded by a timeout.
source "$(dirname "$0")/lib.sh"

SLURM="$ZT_SOURCE_DIR/ctest/local_slurm.sh"
export ZT_SLURM_DIR=$WORK/slurm
trap 'bash "$SLURM" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
export ZT_HOME=$ZT_SOURCE_DIR ZT_BIN=$ZT_BIN_DIR ZT_TRAIN_DATA="$WORK/data/train_*.bin"
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$WORK/data" --val_fraction 0.1 2>/dev/null
# A schedule that does not depend on --max_steps, so runs of different lengths compare.
cat >"$WORK/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 2, "overlap_comm": true}}
JSON
export ZT_CONFIG=$WORK/ds.json
base_args="--block_size 128 --per_device_train_batch_size 8 --bf16"
cd "$WORK" || exit 1

# wait_job ID SECONDS: waits until the job has ended; prints "STATE EXITCODE".
wait_job() {
  local id=$1 limit=$2 state info
  for ((i = 0; i < limit * 4; i++)); do
    info=$(scontrol show job "$id" -o 2>/dev/null)
    state=$(grep -o 'JobState=[A-Z_]*' <<<"$info" | cut -d= -f2)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY)
        echo "$state $(grep -o 'ExitCode=[0-9:]*' <<<"$info" | cut -d= -f2)"
        return 0
        ;;
    esac
    sleep 0.25
  done
  echo "TIMEOUT-WAITING $state"
  return 1
}
# sbatch_wait SECONDS SBATCH_ARGS...: submits a job and waits for its end as wait_job does;
# true when it COMPLETED with exit code 0. Not sbatch --wait, which sleeps 2, 8, then 32 s between
# its looks at the job (MinJobAge is 600 s here): a 20-second job returned after 42 s, and the
# test's dozen jobs spent about two minutes asleep.
sbatch_wait() {
  local limit=$1 id verdict
  shift
  id=$(timeout 30 sbatch --parsable "$@") || return 1
  id=${id%%;*}
  if ! verdict=$(wait_job "$id" "$limit"); then
    timeout 30 scancel "$id"
    return 1
  fi
  [[ $verdict == "COMPLETED 0:0" ]]
}
losses() { /usr/bin/python3 -c "
import json, sys
steps = {}
for l in map(json.loads, open(sys.argv[1])):
    if l['event'] == 'step': steps[l['step']] = l['loss']
print(' '.join(repr(steps[k]) for k in sorted(steps)))" "$1"; }

if ! bash "$SLURM" up 1 >"$WORK/slurm_up.log" 2>&1; then
  fail "local Slurm did not start: $(tail -5 "$WORK/slurm_up.log")"
  finish
  exit 1
fi

# ---- the job scripts, one node ----
# Defaults: submitted from the checkout, with quickstart's data in ZT_OUT/data (ZT_OUT keeps the
# outputs here) and no other setting.
mkdir -p "$WORK/out"
cp -r "$WORK/data" "$WORK/out/data"
if (cd "$ZT_SOURCE_DIR" && unset ZT_HOME ZT_TRAIN_DATA ZT_CONFIG &&
      ZT_OUT="$WORK/out" sbatch_wait 600 -o "$WORK/default.out" jobs/train_slurm.sbatch); then
  default_run=$(grep -o "output $WORK/out/slurm-[0-9]*" "$WORK/default.out" | cut -d' ' -f2)
fi
if [[ -n ${default_run:-} && $(cat "$default_run/latest" 2>/dev/null) == global_step300 ]] &&
   grep -q '"event":"end"' "$default_run/metrics.jsonl"; then
  pass "train_slurm.sbatch with its defaults: quickstart's data, 300 steps, $(basename "$default_run")/global_step300"
else
  fail "train_slurm.sbatch defaults: $(tail -5 "$WORK/default.out")"
fi
if ZT_OUTPUT_DIR=$WORK/run1 ZT_SAVE_STEPS=10 ZT_ARGS="$base_args --max_steps 20" \
   sbatch_wait 300 -n 2 -o "$WORK/run1.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   [[ $(cat "$WORK/run1/latest") == global_step20 ]] && grep -q '"world_size":2' "$WORK/run1/metrics.jsonl"; then
  pass "train_slurm.sbatch: 2 tasks, 20 steps, checkpoints at 10 and 20"
else
  fail "train_slurm.sbatch: $(tail -5 "$WORK/run1.out")"
fi
if ZT_OUTPUT_DIR=$WORK/run1 sbatch_wait 300 -o "$WORK/consolidate.out" "$ZT_SOURCE_DIR/jobs/consolidate.sh" &&
   [[ -s $WORK/run1/hf/model.safetensors && -s $WORK/run1/hf/config.json ]]; then
  pass "consolidate.sh as a job: model.safetensors from global_step20"
else
  fail "consolidate.sh: $(tail -5 "$WORK/consolidate.out")"
fi
if ZT_MODEL=$ZT_SOURCE_DIR/configs/models/gpt2-demo.json ZT_GPU_MEMORY=1GB ZT_CPU_MEMORY=4GB \
   sbatch_wait 300 -n 2 --ntasks-per-node 2 -o "$WORK/estimate.out" "$ZT_SOURCE_DIR/jobs/estimate.sh" &&
   grep -q 'per CPU  |  per GPU' "$WORK/estimate.out" && grep -q 'HW: Setup with 1 node, 2 GPUs per node' "$WORK/estimate.out" &&
   grep -q '^recommended: stage 0' "$WORK/estimate.out"; then
  pass "estimate.sh as a job: 2 tasks per node from Slurm, DeepSpeed's table and a recommendation"
else
  fail "estimate.sh: $(tail -5 "$WORK/estimate.out")"
fi
# ---- GPUs per node, and the environment through --export ----
# This cluster has no GPUs (no gres), so the GPU step is checked as the command the script
# prints with ZT_DRY_RUN=1 inside a real allocation.
if ZT_GPUS_PER_NODE=2 ZT_DRY_RUN=1 sbatch_wait 120 -N 1 --ntasks-per-node 2 -o "$WORK/gpu_dry.out" \
     "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   grep -q -- "^OMP_NUM_THREADS=1 srun --export=ALL --kill-on-bad-exit=1 --mpi=pmix --nodes=1 --ntasks=2 --ntasks-per-node=2 --gpus-per-node=2 .* --accelerator cuda$" \
     "$WORK/gpu_dry.out"; then
  pass "train_slurm.sbatch ZT_GPUS_PER_NODE=2 in a 1-node job (dry run): srun --ntasks-per-node=2 --gpus-per-node=2, --accelerator cuda"
else
  fail "train_slurm.sbatch GPUs dry run: $(tail -3 "$WORK/gpu_dry.out")"
fi
# A job submitted with an explicit --export list passes it on to its steps (SLURM_EXPORT_ENV);
# srun --export=ALL still hands every task what the script set (OMP_NUM_THREADS) and the
# caller's NCCL_* (a stand-in zerotrain prints what each task got).
mkdir -p "$WORK/fakebin/src"
printf '#!/bin/sh\necho "task $SLURM_PROCID OMP_NUM_THREADS=$OMP_NUM_THREADS NCCL_DEBUG=$NCCL_DEBUG"\n' >"$WORK/fakebin/src/zerotrain"
chmod +x "$WORK/fakebin/src/zerotrain"
if sbatch_wait 120 -n 2 -o "$WORK/export.out" \
     --export="PATH=$PATH,ZT_HOME=$ZT_HOME,ZT_BIN=$WORK/fakebin,ZT_TRAIN_DATA=$ZT_TRAIN_DATA,ZT_CONFIG=$ZT_CONFIG,ZT_OUTPUT_DIR=$WORK/export,ZT_THREADS=3,NCCL_DEBUG=INFO" \
     "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   [[ $(grep -c '^task [01] OMP_NUM_THREADS=3 NCCL_DEBUG=INFO$' "$WORK/export.out") -eq 2 ]]; then
  pass "a job submitted with --export=LIST: both tasks get OMP_NUM_THREADS=3 and NCCL_DEBUG=INFO (srun --export=ALL)"
else
  fail "environment through --export: $(tail -4 "$WORK/export.out")"
fi
# ---- preemption: SIGTERM -> checkpoint -> requeue -> finish, identical losses ----
ZT_OUTPUT_DIR=$WORK/straight ZT_SAVE_STEPS=1000 ZT_ARGS="$base_args --max_steps 80" \
  sbatch_wait 300 -n 2 -o "$WORK/straight.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch"
reference=$(losses "$WORK/straight/metrics.jsonl" 2>/dev/null)
for at in 4 17; do
  out=$WORK/preempt$at
  id=$(ZT_OUTPUT_DIR=$out ZT_SAVE_STEPS=1000 ZT_ARGS="$base_args --max_steps 80" \
       timeout 60 sbatch --parsable -n 2 -o "$out.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch")
  if ! wait_step "$out/metrics.jsonl" "$at" 120; then fail "preempt at $at: the job never reached step $at"; continue; fi
  timeout 30 scancel --signal=TERM "$id"
  first=$(wait_job "$id" 120)
  stopped=$(grep -o '"event":"preempted","step":[0-9]*' "$out/metrics.jsonl" | grep -o '[0-9]*$')
  # Requeue only once the node has finished cleaning up after the job (its state back to idle):
  # a requeue that races that clean-up was seen to fail the relaunch with no output.
  for ((i = 0; i < 120; i++)); do [[ $(sinfo -h -o %T | sort -u) == idle ]] && break; sleep 0.25; done
  launches=$(grep -c '^train_slurm: job' "$out.out")
  requeue() {
    timeout 30 scontrol requeue "$id" 2>>"$out.out"
    # Slurm holds a requeued job for about two minutes (its EligibleTime); a test need not wait.
    timeout 30 scontrol update jobid="$id" StartTime=now 2>>"$out.out"
    second=$(wait_job "$id" 240)
  }
  requeue
  # Now and then (2 of 7 runs here) Slurm 22.05 failed the relaunch of a requeued job before its
  # batch script ran: no line of ours in the output. That is the scheduler, not the job, so
  # requeue once more; a job of ours that fails is still a failure.
  if [[ $second == FAILED* && $(grep -c '^train_slurm: job' "$out.out") -eq $launches ]]; then
    echo "note: Slurm failed to relaunch requeued job $id before its script ran; requeueing again"
    requeue
  fi
  got=$(losses "$out/metrics.jsonl")
  if [[ $first == "COMPLETED 0:0" && -n $stopped && $second == "COMPLETED 0:0" && -n $reference && $got == "$reference" ]] &&
     grep -q "resuming from the last checkpoint" "$out.out"; then
    pass "preempted at step $stopped (signal sent at $at): exit 0, requeued, resumed, all 80 losses identical"
  else
    fail "preempt at $at: first [$first] stopped at [$stopped] second [$second]; losses equal: $([[ $got == "$reference" ]] && echo yes || echo no); $(tail -4 "$out.out")"
  fi
done

# ---- a lost rank: SIGKILL at a random step ----
for seed in 1 2 3; do
  out=$WORK/kill$seed
  victim=$((seed % 2))
  at=$((3 + (seed * 7) % 11))
  id=$(ZT_OUTPUT_DIR=$out ZT_SAVE_STEPS=2 ZT_ARGS="$base_args --max_steps 100000" \
       timeout 60 sbatch --parsable -n 2 -o "$out.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch")
  if ! wait_step "$out/metrics.jsonl" "$at" 120; then fail "kill seed $seed: never reached step $at"; timeout 30 scancel "$id"; continue; fi
  pid=""
  for p in $(pgrep -f "src/zerotrain .*$out"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=$victim"; then pid=$p; fi
  done
  if [[ -z $pid ]]; then fail "kill seed $seed: rank $victim not found"; timeout 30 scancel "$id"; continue; fi
  start=$SECONDS
  kill -KILL "$pid"
  verdict=$(wait_job "$id" 90)
  elapsed=$((SECONDS - start))
  if [[ $verdict == FAILED* && $elapsed -le 60 ]] && grep -qE "task $victim: Killed" "$out.out" &&
     "$ZT_BIN_DIR/tools/zero_to_fp32" "$out" "$out/hf" >/dev/null 2>"$out.export"; then
    pass "seed $seed: rank $victim killed after step $at: job $verdict in ${elapsed}s, srun named task $victim, $(cat "$out/latest") loads"
  else
    fail "kill seed $seed: [$verdict] after ${elapsed}s; $(tail -4 "$out.out") $(cat "$out.export" 2>/dev/null)"
  fi
done
# The last checkpoint of a killed job resumes.
if ZT_OUTPUT_DIR=$WORK/kill1 ZT_SAVE_STEPS=1000 ZT_ARGS="$base_args --max_steps $(($(cat "$WORK/kill1/latest" | tr -dc 0-9) + 2))" \
   sbatch_wait 300 -n 2 -o "$WORK/kill1_resume.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   grep -q 'resuming from the last checkpoint' "$WORK/kill1_resume.out"; then
  pass "after the lost rank, a new job resumes from latest and finishes"
else
  fail "resume after the lost rank: $(tail -4 "$WORK/kill1_resume.out")"
fi

# ---- two simulated nodes ----
if ! bash "$SLURM" up 2 >"$WORK/slurm_up2.log" 2>&1; then
  fail "two-node Slurm did not start: $(tail -5 "$WORK/slurm_up2.log")"
  finish
  exit 1
fi
sed 's/"zero_optimization"/"checkpoint": {"use_node_local_storage": true}, "zero_optimization"/' "$WORK/ds.json" >"$WORK/ds_local.json"
nodes=$ZT_SLURM_DIR/nodes
if ZT_CONFIG=$WORK/ds_local.json ZT_OUTPUT_DIR=/mnt/nodelocal/run ZT_SAVE_STEPS=5 ZT_ARGS="$base_args --max_steps 10" \
   sbatch_wait 300 -N 2 --ntasks-per-node 1 -o "$WORK/local1.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   [[ -s $nodes/node1/local/run/global_step10/zero_rank_0_optim_states.h5 && -s $nodes/node2/local/run/global_step10/zero_rank_1_optim_states.h5 ]] &&
   [[ ! -e $nodes/node1/local/run/global_step10/zero_rank_1_optim_states.h5 ]] && grep -q '"num_nodes":2' "$nodes/node1/local/run/metrics.jsonl"; then
  pass "2 nodes, node-local storage: each node's disk holds its own rank's shard"
else
  fail "2 nodes node-local: $(tail -5 "$WORK/local1.out")"
fi
if ZT_CONFIG=$WORK/ds_local.json ZT_OUTPUT_DIR=/mnt/nodelocal/run ZT_SAVE_STEPS=5 ZT_ARGS="$base_args --max_steps 15" \
   sbatch_wait 300 -N 2 --ntasks-per-node 1 -o "$WORK/local2.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch" &&
   grep -q 'resuming from the last checkpoint' "$WORK/local2.out" && [[ $(cat "$nodes/node2/local/run/latest") == global_step15 ]]; then
  pass "2 nodes: a second job resumes from the node-local checkpoints and saves step 15 on both"
else
  fail "2 nodes node-local resume: $(tail -5 "$WORK/local2.out")"
fi
shared2() {
  ZT_OUTPUT_DIR=$WORK/shared2 ZT_SAVE_STEPS=5 ZT_ARGS="$base_args --max_steps 10" \
    sbatch_wait 300 -N 2 --ntasks-per-node 2 -o "$WORK/shared2.out" "$ZT_SOURCE_DIR/jobs/train_slurm.sbatch"
}
# As above: a job Slurm fails before its script runs (no line of ours in its output) is the
# scheduler's failure, submitted once more; one of ours that fails is still a failure.
if ! shared2 && ! grep -q '^train_slurm: job' "$WORK/shared2.out" 2>/dev/null; then
  echo "note: Slurm failed the 2-node job before its script ran; submitting it again"
  shared2
fi
if [[ $(cat "$WORK/shared2/latest" 2>/dev/null) == global_step10 ]] &&
   ZT_OUTPUT_DIR=$WORK/shared2 sbatch_wait 300 -o "$WORK/shared2c.out" "$ZT_SOURCE_DIR/jobs/consolidate.sh" &&
   [[ -s $WORK/shared2/hf/model.safetensors ]] && grep -q '"world_size":4' "$WORK/shared2/metrics.jsonl"; then
  pass "2 nodes x 2 tasks, shared storage: train, save, consolidate"
else
  fail "2 nodes shared: $(tail -n 5 "$WORK/shared2.out" "$WORK/shared2c.out" 2>&1; ls "$WORK/shared2" 2>&1 | tr "\n" " ")"
fi
finish
