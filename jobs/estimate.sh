#!/usr/bin/env bash
# Runs zero_estimate for a planned job: DeepSpeed's model-state table, what zerotrain will
# allocate per rank, and (with ZT_GPU_MEMORY and ZT_CPU_MEMORY) the fastest configuration that
# fits. Inside an allocation (salloc/sbatch) it takes the node and task counts from Slurm. Its
# arguments go to zero_estimate (for example --bf16 --gradient_checkpointing, or --json).
#
#   ZT_STAGE=3 ZT_GPUS_PER_NODE=8 ZT_NODES=4 jobs/estimate.sh
#   ZT_GPU_MEMORY=80GB ZT_CPU_MEMORY=512GB ZT_NVME_CAPACITY=2TB jobs/estimate.sh
#
# Settings (environment):
#   ZT_MODEL          model config.json               (default: $ZT_HOME/configs/models/gpt2-124M.json)
#   ZT_CONFIG         DeepSpeed config to estimate, optional
#   ZT_STAGE          ZeRO stage for DeepSpeed's table (default: 3)
#   ZT_GPUS_PER_NODE  ranks per node                  (default: $SLURM_NTASKS_PER_NODE, else 1)
#   ZT_NODES          nodes                           (default: $SLURM_JOB_NUM_NODES, else 1)
#   ZT_MICRO_BATCH, ZT_BLOCK_SIZE                     (default: 8, the model's n_positions)
#   ZT_GPU_MEMORY, ZT_CPU_MEMORY, ZT_NVME_CAPACITY    the recommender's budget, e.g. 80GB
#   ZT_ARGS           more zero_estimate flags, before the script's arguments
#   ZT_HOME / ZT_BIN  as in train_slurm.sbatch
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
home=${ZT_HOME:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}}
# Under sbatch the script runs from a copy: not in a checkout, an installed zerotrain on PATH.
if [[ ! -f $home/jobs/lib/programs.sh ]] && zt=$(command -v zerotrain); then home=${zt%/*}/../share/zerotrain; fi
source "$home/jobs/lib/programs.sh"
read -r -a zt_args <<<"${ZT_ARGS:-}"
source "$home/jobs/lib/flags.sh" "${zt_args[@]}" "$@"
per_node=${ZT_GPUS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-1}}
per_node=${per_node%%(*}  # Slurm writes e.g. "4(x2)"
given --params || add --config_name "${ZT_MODEL:-$home/configs/models/gpt2-124M.json}"
add --stage "${ZT_STAGE:-3}"
add --num_gpus_per_node "$per_node"
add --num_nodes "${ZT_NODES:-${SLURM_JOB_NUM_NODES:-1}}"
add --per_device_train_batch_size "${ZT_MICRO_BATCH:-8}"
[[ -n ${ZT_BLOCK_SIZE:-} ]] && add --block_size "$ZT_BLOCK_SIZE"
[[ -n ${ZT_CONFIG:-} ]] && add --deepspeed "$ZT_CONFIG"
[[ -n ${ZT_GPU_MEMORY:-} ]] && add --gpu_memory "$ZT_GPU_MEMORY"
[[ -n ${ZT_CPU_MEMORY:-} ]] && add --cpu_memory "$ZT_CPU_MEMORY"
[[ -n ${ZT_NVME_CAPACITY:-} ]] && add --nvme_capacity "$ZT_NVME_CAPACITY"
program=$(zt_program zero_estimate) ||
  { echo "estimate: no zero_estimate $zt_bin_hint (run jobs/quickstart.sh, or set ZT_BIN)" >&2; exit 2; }
exec "$program" "${args[@]}" "${user_args[@]}"
