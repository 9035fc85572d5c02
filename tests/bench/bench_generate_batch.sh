#!/usr/bin/env bash
# Batched generation with batch-invariant matrix products (issue 32): zero_generate with the
# decoder's fixed-order GEMMs (--batch_invariant true, the default) against the GEMM library's
# (--batch_invariant false: OpenBLAS on the CPU), side by side in one run, interleaved. Models:
# GPT-2 124M and the Llama 56M benchmark shape (configs/models/llama-tiny-bench.json), random
# weights; 16 prompts of ZT_BENCH_PROMPT tokens (default 32), ZT_BENCH_TOKENS new tokens each
# (default 16), greedy, at --batch_size 1, 4 and 16, each run twice (the faster counts). Prints
# each side's prefill time, decode tokens/s and wall time, and the ratios. Checks: the
# batch-invariant outputs are byte-identical at every batch size (the library's need not be; the
# table says whether they were), and the batch-invariant run's wall time is <= 1.1x the
# library's at every batch size. Exit 1 when one is missed. Settings: ZT_BENCH_THREADS (default
# nproc), BUILD (default build/release).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/lib.sh
threads=${ZT_BENCH_THREADS:-$(nproc)}
prompt_tokens=${ZT_BENCH_PROMPT:-32}
new_tokens=${ZT_BENCH_TOKENS:-16}
build=${BUILD:-build/release}
work=$(mktemp -d /tmp/zt_bench_generate_batch.XXXXXX)
trap 'rm -rf "$work"' EXIT
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target zero_generate >/dev/null
pylib=$(install_bench_pylib "$build")
print_machine

PYTHONPATH=$pylib /usr/bin/python3 - "$work" configs/models/llama-tiny-bench.json "$prompt_tokens" <<'PY'
import json, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
work, llama_json, prompt = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
with torch.no_grad():
    GPT2LMHeadModel(GPT2Config()).save_pretrained(f"{work}/gpt2", safe_serialization=True)
    LlamaForCausalLM(LlamaConfig(**json.load(open(llama_json)))).save_pretrained(f"{work}/llama",
                                                                                safe_serialization=True)
with open(f"{work}/prompts.jsonl", "w") as f:
    for p in range(16):
        f.write(json.dumps({"input_ids": [(97 * p + 31 * i) % 30000 + 5 for i in range(prompt)]}) + "\n")
PY

results=()
for model in gpt2 llama; do
  for batch in 1 4 16; do
    for run in true.1 false.1 true.2 false.2; do
      invariant=${run%.*}
      out="$work/$model.$batch.$run.jsonl"
      start=$(date +%s.%N)
      OMP_NUM_THREADS=$threads "$build/tools/zero_generate" --model_name_or_path "$work/$model" \
        --prompts "$work/prompts.jsonl" --batch_size "$batch" --max_new_tokens "$new_tokens" \
        --batch_invariant "$invariant" --output "$out" 2>"$work/log"
      end=$(date +%s.%N)
      line=$(grep ' new tokens at ' "$work/log")
      echo "# $model batch $batch batch_invariant $invariant: $line" >&2
      prefill=$(sed -n 's/.* tokens in \([0-9.e+-]*\) ms.*/\1/p' <<<"$line")
      rate=$(sed -n 's/.* new tokens at \([0-9.e+-]*\) tokens\/s.*/\1/p' <<<"$line")
      results+=("$model $batch $invariant $prefill $rate $(/usr/bin/python3 -c "print($end - $start)") $out")
    done
  done
done

/usr/bin/python3 - "${results[@]}" <<'PY'
import sys
runs = {}
for r in sys.argv[1:]:
    model, batch, invariant, prefill, rate, wall, out = r.split()
    run = [float(prefill), float(rate), float(wall), open(out).read()]
    key = (model, int(batch), invariant == "true")
    if key in runs:  # the faster run's figures; the outputs must agree or the ids are not repeatable
        if runs[key][3] != run[3]:
            run[3] = None
        if runs[key][2] < run[2]:
            run[:3] = runs[key][:3]
    runs[key] = run
ok = True
print(f"{'model':6} {'batch':>5} | {'prefill ms':>21} | {'decode tokens/s':>21} | {'wall s':>15} | "
      f"{'ratio':>5} | same ids as batch 1")
for model in ("gpt2", "llama"):
    for batch in (1, 4, 16):
        inv, lib = runs[(model, batch, True)], runs[(model, batch, False)]
        ratio = inv[2] / lib[2]
        same_inv = inv[3] is not None and inv[3] == runs[(model, 1, True)][3]
        same_lib = lib[3] is not None and lib[3] == runs[(model, 1, False)][3]
        ok &= same_inv and ratio <= 1.1
        print(f"{model:6} {batch:5} | {inv[0]:9.1f} vs {lib[0]:9.1f} | {inv[1]:9.2f} vs {lib[1]:9.2f} | "
              f"{inv[2]:6.2f} vs {lib[2]:6.2f} | {ratio:5.2f} | invariant {'yes' if same_inv else 'NO'}, "
              f"library {'yes' if same_lib else 'no'}")
print("(each cell: batch-invariant vs library GEMMs; ratio: wall time, invariant / library)")
print("targets: batch-invariant outputs byte-identical at every batch size, wall time <= 1.1x the library's:",
      "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
