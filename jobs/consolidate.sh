#!/usr/bin/env bash
# Consolidates a training run's last (or a chosen) checkpoint into an HF model with zero_to_fp32.
# Run it after the job, by hand or as a dependent Slurm job. Its arguments go to zero_to_fp32
# (for example --overwrite to replace an earlier export, or --hdf5).
#
#   jobs/consolidate.sh                           # after jobs/train_mpirun.sh: out/mpirun -> out/mpirun/hf
#   ZT_OUTPUT_DIR=out/quickstart jobs/consolidate.sh --overwrite
#   sbatch --dependency=afterok:$TRAIN_JOB --export=ALL,ZT_OUTPUT_DIR=out/slurm-$TRAIN_JOB jobs/consolidate.sh
#
# It needs every rank's shard in one file system (a shared one, not node-local disks).
#
# Settings (environment):
#   ZT_OUTPUT_DIR       the training output directory   (default: $ZT_OUT/mpirun, train_mpirun.sh's)
#   ZT_EXPORT_DIR       where the model goes            (default: $ZT_OUTPUT_DIR/hf)
#   ZT_TAG              checkpoint tag, e.g. global_step500 (default: the run's `latest`)
#   ZT_DTYPE            fp32, bf16 or fp16              (default: fp32)
#   ZT_MAX_SHARD_SIZE   split past this size            (default: 5GB)
#   ZT_OUT, ZT_HOME, ZT_BIN   as in train_mpirun.sh
#SBATCH --job-name=zerotrain-consolidate
#SBATCH --ntasks=1
#SBATCH --output=zerotrain-consolidate-%j.out
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#SBATCH/d;s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
home=${ZT_HOME:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}}
# Under sbatch the script runs from a copy: not in a checkout, an installed zerotrain on PATH.
if [[ ! -f $home/jobs/lib/programs.sh ]] && zt=$(command -v zerotrain); then home=${zt%/*}/../share/zerotrain; fi
source "$home/jobs/lib/programs.sh"
out=${ZT_OUTPUT_DIR:-${ZT_OUT:-$zt_out_default}/mpirun}
program=$(zt_program zero_to_fp32) ||
  { echo "consolidate: no zero_to_fp32 $zt_bin_hint (run jobs/quickstart.sh, or set ZT_BIN)" >&2; exit 2; }
source "$home/jobs/lib/flags.sh" "$@"
add --dtype "${ZT_DTYPE:-fp32}"
add --max_shard_size "${ZT_MAX_SHARD_SIZE:-5GB}"
add --fsync
[[ -n ${ZT_TAG:-} ]] && ! given -t && add --tag "$ZT_TAG"
exec "$program" "$out" "${ZT_EXPORT_DIR:-$out/hf}" "${args[@]}" "${user_args[@]}"
