#!/usr/bin/env bash
# The demo: byte-level shards from the shipped corpus, a build, and a few hundred steps of the
# small demo GPT-2 on 2 MPI ranks with ZeRO stage 2, with a live progress line. Ends by printing
# where the outputs are.
#
# Settings (environment variables):
#   ZT_OUT       output directory              (default: ./out/quickstart)
#   ZT_STEPS     optimizer steps               (default: 300)
#   ZT_RANKS     MPI ranks                     (default: 2)
#   ZT_STAGE     ZeRO stage, 0-3               (default: 2)
#   ZT_DTYPE     fp32 | bf16 | fp16            (default: fp32)
#   ZT_CORPUS    text file to train on         (default: share/data/tinyshakespeare.txt)
#   ZT_CONFIG    DeepSpeed config              (default: configs/zero$ZT_STAGE.json; e.g.
#                configs/zero2_offload_cpu.json for ZeRO-Offload)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${ZT_OUT:-$root/out/quickstart}
steps=${ZT_STEPS:-300}
dtype=${ZT_DTYPE:-fp32}
ranks=${ZT_RANKS:-2}
stage=${ZT_STAGE:-2}
corpus=${ZT_CORPUS:-$root/share/data/tinyshakespeare.txt}

./jobs/install_deps.sh
echo "== building (build/release)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target zerotrain zero_prepare_data >/dev/null
bin=$root/build/release

echo "== preparing byte-level shards from $corpus"
data=$out/data
mkdir -p "$data"
"$bin/tools/zero_prepare_data" "$corpus" --output_dir "$data" --val_fraction 0.1 --overwrite

dtype_flag=()
case $dtype in
  fp32) ;;
  bf16 | fp16) dtype_flag=(--"$dtype") ;;
  *) echo "quickstart: ZT_DTYPE must be fp32, bf16 or fp16 (got '$dtype')" >&2; exit 2 ;;
esac

[[ -f configs/zero$stage.json ]] || { echo "quickstart: ZT_STAGE must be 0-3 (got '$stage')" >&2; exit 2; }
config=${ZT_CONFIG:-configs/zero$stage.json}
[[ -f $config ]] || { echo "quickstart: ZT_CONFIG: $config does not exist" >&2; exit 2; }
# The global batch stays 16 sequences whatever the rank count; the cores are shared out.
per_rank=$((16 / ranks))
((per_rank >= 1 && per_rank * ranks == 16)) || { echo "quickstart: ZT_RANKS must divide 16" >&2; exit 2; }
threads=$(($(nproc) / ranks))
((threads >= 1)) || threads=1
launcher=(mpirun -np "$ranks" --oversubscribe -x OMP_NUM_THREADS="$threads")
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)

echo "== training configs/models/gpt2-demo.json: $ranks ranks, $config, $steps steps ($dtype)"
"${launcher[@]}" "$bin/src/zerotrain" \
  --deepspeed "$config" \
  --config_name configs/models/gpt2-demo.json \
  --train_data "$data/train_*.bin" --eval_data "$data/val_*.bin" \
  --output_dir "$out/run" --overwrite_output_dir \
  --max_steps "$steps" --per_device_train_batch_size "$per_rank" --block_size 128 \
  --learning_rate 3e-3 --warmup_steps 20 --weight_decay 0.1 \
  --do_eval --eval_on_start --eval_steps 100 --max_eval_samples 256 "${dtype_flag[@]}"

echo
echo "== done"
echo "metrics:  $out/run/metrics.jsonl   (one JSON object per line: start, step, eval, end)"
echo "outputs:  $out/run"
echo "data:     $data"
