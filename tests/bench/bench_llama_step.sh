#!/usr/bin/env bash
# Side-by-side Llama training step (issue 16): zerotrain against HF transformers' LlamaForCausalLM
# (eager attention) on PyTorch, one rank, fp32, the same config.json, batch, sequence length and
# thread count, in one run. Target: our step <= 1.0x the best PyTorch step. Default shape
# (configs/models/llama-tiny-bench.json): 8 layers, hidden 512, 8 heads / 4 KV heads, SwiGLU 1408,
# vocab 32000 untied (56 M parameters), batch 4 x 128 tokens.
#
# PyTorch peers: Debian's python3-torch (1.13) always; a torch 2.x too when ZT_BENCH_TORCH2 names
# a python that has it (default build/bench-venv/bin/python when present). Every side runs at the
# same thread count and at 1 thread, interleaved; each side's faster time is its own (on a shared
# machine a second thread can cost more than it gives, and on either side), and the check
# best(zerotrain) / best(pytorch) <= 1 holds against every PyTorch. The same-thread ratio is
# printed too.
# A bench-only venv with PyPI's CPU+CUDA wheel (torch never touches a GPU here; its CUDA
# libraries only have to load):
#   /usr/bin/python3 -m venv build/bench-venv
#   build/bench-venv/bin/pip download --no-deps -d build/bench-wheels torch
#   build/bench-venv/bin/pip install --no-deps build/bench-wheels/torch-*.whl nvidia-cusparselt-cu13 \
#     nvidia-nvshmem-cu13 nvidia-cufile nvidia-nccl-cu13
#   build/bench-venv/bin/pip install filelock typing-extensions sympy networkx jinja2 fsspec numpy
# (with /usr/local/cuda/lib64 supplying the CUDA libraries the --no-deps install skipped).
#
# Settings: ZT_BENCH_THREADS (default: nproc), ZT_BENCH_STEPS (default 8), ZT_BENCH_CONFIG,
# ZT_BENCH_BATCH (4), ZT_BENCH_BLOCK (128), ZT_BENCH_TORCH2, BUILD (default build/release).
# ZT_BENCH_PROFILE=1 adds our per-op breakdown and torch's profiler table.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/lib.sh
threads=${ZT_BENCH_THREADS:-$(nproc)}
steps=${ZT_BENCH_STEPS:-8}
config=${ZT_BENCH_CONFIG:-configs/models/llama-tiny-bench.json}
batch=${ZT_BENCH_BATCH:-4}
block=${ZT_BENCH_BLOCK:-128}
profile=${ZT_BENCH_PROFILE:-0}
build=${BUILD:-build/release}
torch2=${ZT_BENCH_TORCH2:-}
[[ -z $torch2 && -x build/bench-venv/bin/python ]] && torch2=build/bench-venv/bin/python
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target bench_train_step >/dev/null
pylib=$(install_bench_pylib "$build")
print_machine

shape=(--batch "$batch" --block "$block" --steps "$steps")
# ours_run THREADS, torch_run PYTHON THREADS: one measurement's RESULT line (the log to stderr).
ours_run() {
  OMP_NUM_THREADS=$1 "$build/tests/bench/bench_train_step" --config "$config" "${shape[@]}" --profile "$profile" |
    tee >(cat >&2) | grep '^RESULT'
}
torch_run() {
  ZT_PYLIB=$pylib LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64 \
    "$1" tests/bench/torch_llama_step.py "$config" --threads "$2" "${shape[@]}" --profile "$profile" 2>&1 |
    grep -v -i "warn" | tee >(cat >&2) | grep '^RESULT'
}
counts=("$threads")
[[ $threads -ne 1 ]] && counts+=(1)
# Interleaved, so that a change in the machine's load falls on both sides.
results=()
for n in "${counts[@]}"; do
  results+=("ours $(ours_run "$n") threads=$n" "$(torch_run /usr/bin/python3 "$n")")
done
if [[ -n $torch2 ]]; then
  if "$torch2" -c "import torch" 2>/dev/null ||
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$torch2" -c "import torch" 2>/dev/null; then
    for n in "${counts[@]}"; do results+=("$(torch_run "$torch2" "$n")"); done
  else
    echo "# $torch2 cannot import torch: measuring against Debian's torch only" >&2
  fi
fi
/usr/bin/python3 - "$threads" "${results[@]}" <<'PY'
import re, sys
def field(text, key): return re.search(key + r"=(\S+)", text).group(1)
threads, runs = int(sys.argv[1]), sys.argv[2:]
# name -> {threads: step ms}
steps = {}
for r in runs:
    name = "zerotrain" if r.startswith("ours") else "pytorch " + field(r, "torch")
    key = "step_ms" if r.startswith("ours") else "torch_step_ms"
    steps.setdefault(name, {})[int(field(r, "threads"))] = float(field(r, key))
ours = steps.pop("zerotrain")
best_ours = min(ours.values())
print()
print(f"{'step ms':28s}" + "".join(f"{str(n) + (' threads' if n > 1 else ' thread'):>12s}" for n in ours) + f"{'best':>10s}")
for name, by_threads in [("zerotrain", ours)] + list(steps.items()):
    print(f"{name:28s}" + "".join(f"{by_threads[n]:12.1f}" for n in ours) + f"{min(by_threads.values()):10.1f}")
ok = True
for name, by_threads in steps.items():
    same = ours[threads] / by_threads[threads]
    ratio = best_ours / min(by_threads.values())
    print(f"zerotrain / {name}: {same:.2f} at {threads} thread(s); best / best {ratio:.2f}  (target <= 1.00)")
    ok = ok and ratio <= 1.0
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
