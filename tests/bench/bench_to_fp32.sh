#!/usr/bin/env bash
# zero_to_fp32 side by side with DeepSpeed's (issue 17): the same GPT-2-medium shape (24 layers,
# hidden 1024, 16 heads, vocab 50257: 355 M parameters, 1.4 GB of fp32 weights; the largest tensor,
# wte, is 206 MB), a ZeRO stage 2 checkpoint from 2 ranks on each side, each consolidated into
# model.safetensors (fp32), in one run:
#   ours:   mpirun -np 2 zerotrain (1 step, save) -> zero_to_fp32 CKPT OUT
#   theirs: a DeepSpeed engine on the CPU (gloo, 2 ranks; tests/bench/ds_checkpoint.py) ->
#           python -m deepspeed.utils.zero_to_fp32 CKPT OUT
# DeepSpeed's --safe_serialization fails on GPT-2 (safetensors' save_file refuses lm_head.weight,
# which shares wte's storage; checked with deepspeed 0.19.8), so theirs writes pytorch_model.bin
# (torch.save, one copy of the shared tensor: the same 1.42 GB as our model.safetensors).
# Runs alternate (ours, theirs, theirs, ours, ...), each with the page cache dropped first (cold,
# when we may: root) and then again warm. Wall time and peak RSS come from /usr/bin/time -v.
# Targets: the median cold time ours/theirs <= 0.8 (warm printed too), and our peak RSS <= the
# largest tensor + 256 MB. Exits non-zero when one is missed.
#
# The peers live in a bench-only venv (never CI's): torch 2.x, deepspeed, transformers, as
# tests/bench/bench_llama_step.sh describes, plus
#   DS_BUILD_OPS=0 build/bench-venv/bin/pip install deepspeed transformers==4.40.2
# Settings: ZT_BENCH_DIR (default /tmp/zt_bench_to_fp32, on the disk to measure), ZT_BENCH_VENV
# (default build/bench-venv), ZT_BENCH_RUNS (default 3 per side and cache state), BUILD
# (default build/release), ZT_TO_FP32 (our binary, default $BUILD/tools/zero_to_fp32).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/lib.sh
dir=${ZT_BENCH_DIR:-/tmp/zt_bench_to_fp32}
venv=${ZT_BENCH_VENV:-build/bench-venv}
runs=${ZT_BENCH_RUNS:-3}
build=${BUILD:-build/release}
ours=${ZT_TO_FP32:-$build/tools/zero_to_fp32}
python=$venv/bin/python
[[ -x $python ]] || { echo "no $python: make the bench venv first (see this script's header)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
print_machine
mkdir -p "$dir"

# The checkpoints, made once and kept (delete $dir to make them again).
if [[ ! -f $dir/ours/latest ]]; then
  rm -rf "$dir/ours" "$dir/data"
  cat >"$dir/medium.json" <<'JSON'
{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
 "n_layer": 24, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257,
 "layer_norm_epsilon": 1e-05, "initializer_range": 0.02, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
JSON
  "$build/tools/zero_prepare_data" share/data/tinyshakespeare.txt --output_dir "$dir/data" >/dev/null 2>&1
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$build/src/zerotrain" \
    --deepspeed configs/zero2.json --config_name "$dir/medium.json" --train_data "$dir/data/train_*.bin" \
    --output_dir "$dir/ours" --overwrite_output_dir --per_device_train_batch_size 1 --block_size 32 \
    --max_steps 1 --save_steps 1 --disable_tqdm >"$dir/ours.log" 2>&1 || { tail "$dir/ours.log"; exit 1; }
fi
if [[ ! -f $dir/theirs/latest ]]; then
  rm -rf "$dir/theirs"
  "$python" tests/bench/ds_checkpoint.py "$dir/theirs" 2>"$dir/theirs.log" | grep '^#' ||
    { tail "$dir/theirs.log"; exit 1; }
fi
echo "# ours:   $(du -sh "$dir/ours/$(cat "$dir/ours/latest")" | cut -f1) in $dir/ours/$(cat "$dir/ours/latest")"
echo "# theirs: $(du -sh "$dir/theirs/$(cat "$dir/theirs/latest")" | cut -f1) in $dir/theirs/$(cat "$dir/theirs/latest")"

cold=yes
drop_caches() { sync; (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null || cold=no; }
# measure SIDE CACHE: one run; appends "SIDE CACHE seconds rss_kb" to $dir/times.
measure() {
  local side=$1 cache=$2 out=$dir/out_$1
  rm -rf "$out"
  [[ $cache == cold ]] && drop_caches
  if [[ $side == ours ]]; then
    /usr/bin/time -v "$ours" "$dir/ours" "$out" 2>"$dir/time.log" >/dev/null
  else
    /usr/bin/time -v "$python" -m deepspeed.utils.zero_to_fp32 "$dir/theirs" "$out" \
      >"$dir/theirs_run.log" 2>"$dir/time.log"
  fi || { cat "$dir/time.log" >&2; exit 1; }
  ls "$out"/model.safetensors "$out"/pytorch_model.bin >/dev/null 2>&1 || [[ -n $(ls "$out") ]] ||
    { echo "$side wrote nothing in $out" >&2; exit 1; }
  local s rss
  s=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); t = 0; for (i = 1; i <= n; i++) t = t * 60 + p[i];
      print t}' "$dir/time.log")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.log")
  printf '%-6s %-4s %7.2f s %8.0f MB\n' "$side" "$cache" "$s" "$((rss / 1024))" >&2
  echo "$side $cache $s $rss" >>"$dir/times"
}
rm -f "$dir/times"
for ((i = 0; i < runs; i++)); do
  for cache in cold warm; do
    if ((i % 2 == 0)); then order=(ours theirs); else order=(theirs ours); fi
    for side in "${order[@]}"; do
      [[ $cache == warm ]] && measure "$side" cold_unmeasured 2>/dev/null && sed -i '$d' "$dir/times"
      measure "$side" "$cache"
    done
  done
done
"$python" - "$dir/times" "$cold" "$(du -sb "$dir/out_ours" | cut -f1)" "$(du -sb "$dir/out_theirs" | cut -f1)" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cold_ok = sys.argv[2] == "yes"
ours_bytes, theirs_bytes = int(sys.argv[3]), int(sys.argv[4])
t = {}
for side, cache, s, rss in rows:
    t.setdefault((side, cache), []).append((float(s), int(rss) * 1024))
largest = 50257 * 1024 * 4
bound = largest + 256e6
print()
print(f"{'':18s}{'median s':>10s}{'best s':>9s}{'peak RSS MB':>13s}")
for cache in ("cold", "warm"):
    for side in ("ours", "theirs"):
        v = t[(side, cache)]
        print(f"{side + ' ' + cache:18s}{statistics.median(s for s, _ in v):10.2f}{min(s for s, _ in v):9.2f}"
              f"{max(r for _, r in v) / 1e6:13.0f}")
ratio = {c: statistics.median(s for s, _ in t[("ours", c)]) / statistics.median(s for s, _ in t[("theirs", c)])
         for c in ("cold", "warm")}
rss_ours = max(r for _, r in t[("ours", "cold")] + t[("ours", "warm")])
rss_theirs = max(r for _, r in t[("theirs", "cold")] + t[("theirs", "warm")])
print(f"written: ours {ours_bytes / 1e9:.3f} GB (model.safetensors), theirs {theirs_bytes / 1e9:.3f} GB "
      "(pytorch_model.bin)")
print(f"time ours/theirs (median): cold {ratio['cold']:.2f}x{'' if cold_ok else ' (caches could not be dropped)'}, "
      f"warm {ratio['warm']:.2f}x (target <= 0.8x)")
print(f"peak RSS: ours {rss_ours / 1e6:.0f} MB ({rss_ours / rss_theirs:.2f}x theirs, {rss_theirs / 1e6:.0f} MB); "
      f"bound: largest tensor {largest / 1e6:.0f} MB + 256 MB = {bound / 1e6:.0f} MB")
judged = ratio["cold"] if cold_ok else ratio["warm"]
ok = judged <= 0.8 and rss_ours <= bound
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
