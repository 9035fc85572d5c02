#!/usr/bin/env bash
# Trains with zerotrain under mpirun: one node, or the hosts of a hostfile.
#
#   ZT_RANKS=4 jobs/train_mpirun.sh
#   ZT_HOSTFILE=hosts ZT_RANKS=16 ZT_THREADS=8 ZT_ARGS="--bf16 --max_steps 5000" jobs/train_mpirun.sh
#
# A run stopped with SIGTERM (Ctrl-C sends SIGINT: use `kill -TERM`) saves a checkpoint after its
# current step and exits 0; run the script again to continue from OUTPUT/latest. mpirun is given
# ZT_GRACE seconds between forwarding SIGTERM and killing the ranks, for that save (Open MPI 4.1's
# mpirun then waits out the whole grace before it exits, even when the ranks are done sooner).
#
# Settings (environment):
#   ZT_HOME        the zerotrain checkout                  (default: this script's repository)
#   ZT_BIN         directory with src/zerotrain            (default: $ZT_HOME/build/release)
#   ZT_RANKS       MPI ranks                               (default: 1)
#   ZT_HOSTFILE    Open MPI hostfile, optional             (default: this node only)
#   ZT_THREADS     OpenMP threads per rank                 (default: cores / ranks on one node, else 1)
#   ZT_CONFIG      DeepSpeed config                        (default: $ZT_HOME/configs/zero2.json)
#   ZT_MODEL       model config.json (--config_name)       (default: $ZT_HOME/configs/models/gpt2-demo.json)
#   ZT_TRAIN_DATA  training shards (glob)                  (default: $ZT_HOME/out/data/train_*.bin)
#   ZT_EVAL_DATA   eval shards (glob), optional
#   ZT_OUTPUT_DIR  checkpoints and metrics                 (default: $ZT_HOME/out/mpirun)
#   ZT_SAVE_STEPS  checkpoint every this many steps        (default: 100)
#   ZT_GRACE       seconds for the SIGTERM checkpoint      (default: 120)
#   ZT_ARGS        more zerotrain flags
set -uo pipefail

home=${ZT_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${ZT_BIN:-$home/build/release}
ranks=${ZT_RANKS:-1}
config=${ZT_CONFIG:-$home/configs/zero2.json}
model=${ZT_MODEL:-$home/configs/models/gpt2-demo.json}
train_data=${ZT_TRAIN_DATA:-$home/out/data/train_*.bin}
out=${ZT_OUTPUT_DIR:-$home/out/mpirun}
save_steps=${ZT_SAVE_STEPS:-100}
grace=${ZT_GRACE:-120}
read -r -a extra <<<"${ZT_ARGS:-}"
if [[ -n ${ZT_THREADS:-} ]]; then
  threads=$ZT_THREADS
elif [[ -n ${ZT_HOSTFILE:-} ]]; then
  threads=1
else
  threads=$(($(nproc) / ranks))
  ((threads >= 1)) || threads=1
fi

say() { echo "train_mpirun: $*" >&2; }
[[ -x $bin/src/zerotrain ]] || { say "no zerotrain under $bin (set ZT_BIN or build first)"; exit 2; }
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { say "ZT_RANKS must be a positive number, got '$ranks'"; exit 2; }
launcher=(mpirun -np "$ranks" -x OMP_NUM_THREADS="$threads" --mca odls_base_sigkill_timeout "$grace")
[[ -n ${ZT_HOSTFILE:-} ]] && launcher+=(--hostfile "$ZT_HOSTFILE")
[[ -z ${ZT_HOSTFILE:-} && $ranks -gt $(nproc) ]] && launcher+=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
args=(--deepspeed "$config" --config_name "$model" --train_data "$train_data" --output_dir "$out"
      --save_steps "$save_steps" --disable_tqdm)
[[ -n ${ZT_EVAL_DATA:-} ]] && args+=(--eval_data "$ZT_EVAL_DATA")
if [[ -e $out/latest ]]; then
  args+=(--resume_from_checkpoint auto)
  say "resuming from $out/$(cat "$out/latest")"
fi
"${launcher[@]}" "$bin/src/zerotrain" "${args[@]}" "${extra[@]}"
rc=$?
# mpirun reports a signalled job as failed even when every rank saved and exited 0.
if [[ $(tail -n 1 "$out/metrics.jsonl" 2>/dev/null) == *'"event":"preempted"'* ]]; then
  say "stopped by a signal after saving $(cat "$out/latest"); run again to continue"
  exit 0
fi
exit $rc
