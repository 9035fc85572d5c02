#!/usr/bin/env bash
# Consolidates a training run's last (or a chosen) checkpoint into an HF model with zero_to_fp32,
# after the job, for example as a dependent Slurm job:
#
#   sbatch --dependency=afterok:$TRAIN_JOB --export=ALL,ZT_OUTPUT_DIR=out/slurm-$TRAIN_JOB jobs/consolidate.sh
#
# It needs every rank's shard in one file system (a shared one, not node-local disks).
#
# Settings (environment):
#   ZT_OUTPUT_DIR       the training output directory (required)
#   ZT_EXPORT_DIR       where the model goes            (default: $ZT_OUTPUT_DIR/hf)
#   ZT_TAG              checkpoint tag, e.g. global_step500 (default: the run's `latest`)
#   ZT_DTYPE            fp32, bf16 or fp16              (default: fp32)
#   ZT_MAX_SHARD_SIZE   split past this size            (default: 5GB)
#   ZT_HOME / ZT_BIN    as in train_slurm.sbatch
#SBATCH --job-name=zerotrain-consolidate
#SBATCH --ntasks=1
#SBATCH --output=zerotrain-consolidate-%j.out
set -uo pipefail
home=${ZT_HOME:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}}
bin=${ZT_BIN:-$home/build/release}
out=${ZT_OUTPUT_DIR:?set ZT_OUTPUT_DIR to the training output directory}
args=("$out" "${ZT_EXPORT_DIR:-$out/hf}" --dtype "${ZT_DTYPE:-fp32}" --max_shard_size "${ZT_MAX_SHARD_SIZE:-5GB}" --fsync)
[[ -n ${ZT_TAG:-} ]] && args+=(-t "$ZT_TAG")
exec "$bin/tools/zero_to_fp32" "${args[@]}"
