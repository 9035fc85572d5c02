#!/usr/bin/env bash
# The demo: builds zerotrain and its tools, makes byte-level shards from the shipped corpus, and
# trains the small demo GPT-2 for a few hundred steps on 2 MPI ranks with ZeRO stage 2, through
# jobs/train_mpirun.sh (so Ctrl-C saves and stops the same way). Ends by printing where the
# outputs are and what to run next. Its arguments go to zerotrain, for example
# `jobs/quickstart.sh --gradient_checkpointing`. A second run starts over. Run from an installed
# zerotrain (PREFIX/share/zerotrain/jobs/quickstart.sh, after cmake --install or the .deb), it
# installs and builds nothing: it runs the programs in PREFIX/bin (or on PATH) and writes to ./out.
#
# Settings (environment variables):
#   ZT_OUT       where the jobs scripts keep their data and runs (default: the checkout's out/,
#                or ./out from an installed zerotrain); the shards go
#                to $ZT_OUT/data, where jobs/train_mpirun.sh looks by default
#   ZT_STEPS     optimizer steps               (default: 300)
#   ZT_RANKS     MPI ranks                     (default: 2)
#   ZT_STAGE     ZeRO stage, 0-3               (default: 2)
#   ZT_DTYPE     fp32 | bf16 | fp16            (default: fp32)
#   ZT_CORPUS    text file to train on         (default: the shipped tinyshakespeare.txt)
#   ZT_CONFIG    DeepSpeed config              (default: configs/zero$ZT_STAGE.json; e.g.
#                configs/zero2_offload_cpu.json for ZeRO-Offload)
#   ZT_BIN       an existing build or bin/ folder to use instead of building build/release, optional
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
home=$(cd "$(dirname "$0")/.." && pwd)  # the checkout, or an installed PREFIX/share/zerotrain
source "$home/jobs/lib/programs.sh"      # before the cd: an installed run writes to ./out
cd "$home"
out_root=${ZT_OUT:-$zt_out_default}
out=$out_root/quickstart
data=$out_root/data
steps=${ZT_STEPS:-300}
dtype=${ZT_DTYPE:-fp32}
ranks=${ZT_RANKS:-2}
stage=${ZT_STAGE:-2}
corpus=${ZT_CORPUS:-$zt_data/tinyshakespeare.txt}

say() { echo "quickstart: $*" >&2; }
dtype_flag=()
case $dtype in
  fp32) ;;
  bf16 | fp16) dtype_flag=(--"$dtype") ;;
  *) say "ZT_DTYPE must be fp32, bf16 or fp16 (got '$dtype')"; exit 2 ;;
esac
[[ -f configs/zero$stage.json ]] || { say "ZT_STAGE must be 0-3 (got '$stage')"; exit 2; }
config=${ZT_CONFIG:-configs/zero$stage.json}
[[ -f $config ]] || { say "ZT_CONFIG: no such file: $config"; exit 2; }
[[ -f $corpus ]] || { say "ZT_CORPUS: no such file: $corpus"; exit 2; }
# The global batch stays 16 sequences whatever the rank count; the cores are shared out.
[[ $ranks =~ ^[1-9][0-9]*$ ]] && ((16 % ranks == 0)) || { say "ZT_RANKS must divide 16 (got '$ranks')"; exit 2; }

if [[ -n ${ZT_BIN:-} || $zt_installed == 1 ]]; then  # a build made elsewhere, or an installed one
  zerotrain=$(zt_program zerotrain) || { say "no zerotrain $zt_bin_hint"; exit 2; }
  bin=${ZT_BIN:-${zerotrain%/*}}
  echo "== using the programs in $bin"
else
  ./jobs/install_deps.sh
  bin=$home/build/release
  echo "== building zerotrain and its tools (build/release)"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target zt_programs >/dev/null
fi
prepare=$(ZT_BIN=$bin zt_program zero_prepare_data) || { say "no zero_prepare_data $zt_bin_hint"; exit 2; }

echo "== preparing byte-level shards from $corpus"
mkdir -p "$data"
"$prepare" "$corpus" --output_dir "$data" --val_fraction 0.1 --overwrite

echo "== training configs/models/gpt2-demo.json: $ranks ranks, $config, $steps steps ($dtype)"
ZT_HOME=$home ZT_BIN=$bin ZT_OUT=$out_root ZT_OUTPUT_DIR=$out ZT_RANKS=$ranks ZT_CONFIG=$config \
ZT_MODEL=$home/configs/models/gpt2-demo.json ZT_TRAIN_DATA="$data/train_*.bin" ZT_EVAL_DATA="$data/val_*.bin" \
ZT_MAX_STEPS=$steps ZT_SAVE_STEPS=$steps ZT_ARGS="" \
  ./jobs/train_mpirun.sh --overwrite_output_dir --per_device_train_batch_size $((16 / ranks)) --block_size 128 \
  --learning_rate 3e-3 --warmup_steps 20 --weight_decay 0.1 \
  --do_eval --eval_on_start --eval_steps 100 --max_eval_samples 256 "${dtype_flag[@]}" "$@"

echo
echo "== done"
echo "metrics:     $out/metrics.jsonl   (one JSON object per line: start, step, eval, checkpoint, end)"
echo "checkpoint:  $out/$(cat "$out/latest")"
echo "data:        $data"
jobs=jobs  # as the user runs them: from the checkout, or by their installed path
((zt_installed)) && jobs=$home/jobs
echo "next:        $jobs/train_mpirun.sh                             train on the same data, in $out_root/mpirun"
echo "             ZT_OUTPUT_DIR=$out $jobs/consolidate.sh   export an HF model to $out/hf"
echo "             $jobs/estimate.sh                                 memory needed for a bigger run"
