#!/usr/bin/env bash
# Trains with zerotrain under mpirun: one node, or the hosts of a hostfile. The script's
# arguments go to zerotrain, each in place of the script's own flag of that name.
#
#   jobs/train_mpirun.sh                          # right after jobs/quickstart.sh: its data, 300 steps
#   ZT_RANKS=4 jobs/train_mpirun.sh --bf16 --max_steps 5000
#   ZT_HOSTFILE=hosts ZT_RANKS=16 ZT_THREADS=8 jobs/train_mpirun.sh --learning_rate 1e-4
#   ZT_GPUS_PER_NODE=8 jobs/train_mpirun.sh --bf16          # one rank per GPU, --accelerator cuda
#   ZT_GPUS_PER_NODE=8 ZT_HOSTFILE=hosts jobs/train_mpirun.sh  # 8 ranks on every host of the file
#
# GPUs: with ZT_GPUS_PER_NODE=G the script runs one rank per GPU (G ranks on this node; with a
# hostfile, mpirun --npernode G) and adds --accelerator cuda. Each rank uses the GPU of its rank
# on the node (local rank modulo the GPUs it sees), so every rank sees the same GPUs: set
# CUDA_VISIBLE_DEVICES, if at all, for the whole job. NCCL_*, CUDA_* and ZT_* variables set
# where the script runs reach every rank (mpirun -x), on other hosts too.
#
# Stopping: Ctrl-C (SIGINT) lets every rank finish its step and save, then exits 130; a second
# Ctrl-C stops at once. SIGTERM to this script, or SIGHUP (its terminal closed), saves the same
# way and exits 0 (a preemption).
# Either way, run the script again to continue from OUTPUT/latest. (Open MPI's mpirun does not
# forward SIGINT or SIGTERM to the ranks; the script sends them SIGUSR2 or SIGUSR1 instead.)
#
# Settings (environment):
#   ZT_HOME        the zerotrain checkout, or an installed PREFIX/share/zerotrain
#                                                          (default: this script's repository)
#   ZT_BIN         a build tree (src/zerotrain) or a folder with the programs
#                                                          (default: $ZT_HOME/build/release; installed: PREFIX/bin)
#   ZT_OUT         where the jobs scripts keep their data and runs (default: $ZT_HOME/out; installed: ./out)
#   ZT_RANKS       MPI ranks                               (default: ZT_GPUS_PER_NODE, else 1;
#                                                           with a hostfile and GPUs: G per host)
#   ZT_GPUS_PER_NODE  GPUs per node, one rank each (--accelerator cuda), optional (default: none, CPU)
#   ZT_HOSTFILE    Open MPI hostfile, optional             (default: this node only)
#   ZT_THREADS     OpenMP threads per rank                 (default: cores / ranks on one node, else 1)
#   ZT_CONFIG      DeepSpeed config                        (default: $ZT_HOME/configs/zero2.json)
#   ZT_MODEL       model config.json (--config_name)       (default: $ZT_HOME/configs/models/gpt2-demo.json)
#   ZT_TRAIN_DATA  training shards (glob)                  (default: $ZT_OUT/data/train_*.bin, quickstart's)
#   ZT_EVAL_DATA   eval shards (glob), optional
#   ZT_OUTPUT_DIR  checkpoints and metrics                 (default: $ZT_OUT/mpirun)
#   ZT_MAX_STEPS   optimizer steps                         (default: 300)
#   ZT_SAVE_STEPS  checkpoint every this many steps        (default: 100)
#   ZT_GRACE       seconds mpirun gives the ranks to save when mpirun itself is signalled rather
#                  than this script, optional. Open MPI 4.1's mpirun then waits twice that long
#                  before it exits whenever a job ends early, even after a plain error.
#   ZT_ARGS        more zerotrain flags, before the script's arguments
#   ZT_DRY_RUN     1: print the mpirun command line instead of running it (default: 0)
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac

home=${ZT_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
source "$home/jobs/lib/programs.sh"
out=${ZT_OUTPUT_DIR:-${ZT_OUT:-$zt_out_default}/mpirun}
gpus=${ZT_GPUS_PER_NODE:-}
ranks=${ZT_RANKS:-${gpus:-1}}
dry_run=${ZT_DRY_RUN:-0}

say() { echo "train_mpirun: $*" >&2; }
zerotrain=$(zt_program zerotrain) || { say "no zerotrain $zt_bin_hint (run jobs/quickstart.sh, or set ZT_BIN)"; exit 2; }
[[ -z $gpus || $gpus =~ ^[1-9][0-9]*$ ]] || { say "ZT_GPUS_PER_NODE must be a positive number, got '$gpus'"; exit 2; }
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { say "ZT_RANKS must be a positive number, got '$ranks'"; exit 2; }
[[ $dry_run == [01] ]] || { say "ZT_DRY_RUN must be 0 or 1, got '$dry_run'"; exit 2; }
source "$home/jobs/lib/train_args.sh"
[[ -n $gpus ]] && add --accelerator cuda
[[ -n $resuming ]] && say "resuming from $resuming"
if [[ -n ${ZT_THREADS:-} ]]; then
  threads=$ZT_THREADS
elif [[ -n ${ZT_HOSTFILE:-} ]]; then
  threads=1
else
  threads=$(($(nproc) / ranks))
  ((threads >= 1)) || threads=1
fi
launcher=(mpirun)
# With GPUs and a hostfile, --npernode G places G ranks on each host; -np only when ZT_RANKS caps
# the total, else mpirun fills every host of the file.
[[ -z $gpus || -z ${ZT_HOSTFILE:-} || -n ${ZT_RANKS:-} ]] && launcher+=(-np "$ranks")
[[ -n $gpus && -n ${ZT_HOSTFILE:-} ]] && launcher+=(--npernode "$gpus")
launcher+=(-x OMP_NUM_THREADS="$threads")
# The caller's NCCL, CUDA and zerotrain settings reach every rank, on every host, unchanged (the
# same CUDA_VISIBLE_DEVICES for all: the backend binds local rank modulo the GPUs it sees).
for name in $(compgen -e); do
  case $name in NCCL_* | CUDA_* | ZT_*) launcher+=(-x "$name") ;; esac
done
[[ -n ${ZT_GRACE:-} ]] && launcher+=(--mca odls_base_sigkill_timeout "$ZT_GRACE")
[[ -n ${ZT_HOSTFILE:-} ]] && launcher+=(--hostfile "$ZT_HOSTFILE")
[[ -z ${ZT_HOSTFILE:-} && $ranks -gt $(nproc) ]] && launcher+=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)

if [[ $dry_run == 1 ]]; then
  line=$(printf '%q ' "${launcher[@]}" "$zerotrain" "${args[@]}" "${user_args[@]}")
  echo "${line% }"
  exit 0
fi

# mpirun runs in a process group of its own (job control on), so that a terminal's Ctrl-C reaches
# only this script, which turns it into the signal mpirun forwards. Its stdin is not the terminal:
# a background process group that reads the terminal is stopped.
stop=""
forward() {  # forward SIGNAL WHAT
  trapped=1
  stop=$2
  local job=${pid:-${!:-}}
  [[ -n $job ]] || exit 130  # nothing launched yet
  kill -"$1" "$job" 2>/dev/null
}
trap 'forward USR2 interrupted' INT
trap 'forward USR1 preempted' TERM HUP  # HUP: the terminal closed, which mpirun would not see
# Only what this run writes to metrics.jsonl tells how it ended (an early error writes nothing).
metrics_before=$({ wc -l <"$out/metrics.jsonl"; } 2>/dev/null || echo 0)
set -m
"${launcher[@]}" "$zerotrain" "${args[@]}" "${user_args[@]}" </dev/null &
pid=$!
set +m
while :; do
  trapped=0
  wait "$pid"
  rc=$?
  ((trapped)) || break  # a trap ended the wait early: the job is still running
done
trap - INT TERM HUP

last=$(tail -n +"$((metrics_before + 1))" "$out/metrics.jsonl" 2>/dev/null | tail -n 1)
saved=$(grep -o '"checkpoint":"[^"]*"' <<<"$last" | cut -d'"' -f4)
# The ranks' own verdict: mpirun calls a job it was signalled during failed even when every rank
# saved and exited as asked.
if [[ $last == *'"event":"preempted"'* || $last == *'"event":"interrupted"'* ]]; then
  if [[ -n $saved ]]; then
    say "stopped after saving $saved; run again to continue"
  else
    say "stopped; no checkpoint saved (--save_strategy no)"
  fi
  [[ $last == *'"event":"interrupted"'* ]] && exit 130
  exit 0
elif ((rc == 0)); then
  say "done: outputs in $out"
elif [[ -n $stop && $last == *'"event":"end"'* ]]; then
  say "$stop after the end of training; outputs in $out"
elif [[ -n $stop ]]; then
  say "$stop before a checkpoint was saved (exit $rc)"
fi
exit $rc
