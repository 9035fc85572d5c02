#!/usr/bin/env bash
# bf16 against fp32 and against PyTorch's bf16 autocast (issues 17 and 33), side by side in one
# run: GPT-2 124M (12 layers, 768 wide, vocab 50257), micro-batch 4, block 256, one rank, or the
# model of ZT_BENCH_CONFIG (an HF config.json: configs/models/llama-tiny-bench.json is the Llama
# 56M benchmark shape, block 128 by default). Ours: the same step in fp32, and in bf16 (DeepSpeed's
# bf16: bf16 parameters) with fp32 activations and with bf16 activations; a bf16 run's default is
# bf16 activations on a CPU with bf16 instructions (avx512_bf16), fp32 activations elsewhere.
# Where oneDNN's bf16 GEMMs are faster than fp32 (AMX; AMD's AVX512-BF16) the GEMMs and attention
# read the bf16 operands as they lie; elsewhere they widen them for fp32 GEMMs (our log's "bf16
# GEMMs:" says which). PyTorch: fp32 model, bf16 autocast, AdamW. Each side runs at the thread
# count and at 1 thread, interleaved; each side's faster is its own. Targets, for the default bf16
# run: <= 0.7x PyTorch's bf16; against our fp32 step <= 0.7x where the GEMMs take bf16 operands,
# <= 1.0x where they widen them (an AVX2-only CPU; Intel's AVX512-BF16 without AMX, where oneDNN's
# bf16 GEMMs measured slower than fp32's). Memory (issue 33): the bf16-activation run's peak
# device-pool bytes <= 0.6x the fp32 run's (the pools' measurement, bench_train_step's last line).
# Where oneDNN's bf16 GEMMs run, the bf16-activation step once more with ZT_BF16_WEIGHT_PACKS=1
# (weights kept in oneDNN's layout across micro-steps; off by default): reported, not judged, as
# the figure that decides whether the packs should be on by default on such a CPU.
#
# PyTorch: a torch 2.x when ZT_BENCH_TORCH2 names a python that has it (default
# build/bench-venv/bin/python; the recipe is in bench_llama_step.sh's header), else Debian's 1.13.
# ZT_BENCH_ISA=avx2 runs both sides as on an AVX2-only CPU (ours: ZT_CPU_ISA=avx2; PyTorch:
# ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2; both sides'
# BLAS: OPENBLAS_CORETYPE=Haswell, the kernels OpenBLAS picks on an AVX2-only CPU, where it would
# otherwise keep its AVX-512 ones) and judges the AVX2 targets: indicative only, the other CPU's
# caches and clocks are not emulated. ZT_BENCH_TORCH=skip leaves PyTorch out (its bf16 under
# those limits runs for many minutes a step) and judges only bf16 against our fp32.
# Settings: ZT_BENCH_THREADS (default: nproc), ZT_BENCH_STEPS (default 4), ZT_BENCH_BLOCK (256,
# 128 with ZT_BENCH_CONFIG), ZT_BENCH_BATCH (4), ZT_BENCH_ACCUMULATION (micro-steps a step of
# ours, default 1; only with ZT_BENCH_TORCH=skip, as PyTorch's side runs one), ZT_BENCH_CONFIG,
# ZT_BENCH_ISA, BUILD (default build/release).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/lib.sh
threads=${ZT_BENCH_THREADS:-$(nproc)}
steps=${ZT_BENCH_STEPS:-4}
config=${ZT_BENCH_CONFIG:-}
block=${ZT_BENCH_BLOCK:-$([[ -n $config ]] && echo 128 || echo 256)}
batch=${ZT_BENCH_BATCH:-4}
accumulation=${ZT_BENCH_ACCUMULATION:-1}
if [[ $accumulation != 1 && ${ZT_BENCH_TORCH:-} != skip ]]; then
  echo "ZT_BENCH_ACCUMULATION=$accumulation needs ZT_BENCH_TORCH=skip: PyTorch's side runs one micro-step a step" >&2
  exit 2
fi
build=${BUILD:-build/release}
torch=${ZT_BENCH_TORCH2:-}
[[ -z $torch && -x build/bench-venv/bin/python ]] && torch=build/bench-venv/bin/python
[[ -z $torch ]] && torch=/usr/bin/python3
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target bench_train_step >/dev/null
model=(--block "$block" --batch "$batch" --steps "$steps" --accumulation "$accumulation")
if [[ -n $config ]]; then
  [[ -f $config ]] || { echo "ZT_BENCH_CONFIG: no such file '$config'" >&2; exit 2; }
  model+=(--config "$config")
  pylib=$(install_bench_pylib "$build")  # transformers, for PyTorch's side
fi
print_machine
if [[ ${ZT_BENCH_ISA:-} == avx2 ]]; then
  export ZT_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
  export OPENBLAS_CORETYPE=Haswell
  echo "# both sides limited to AVX2 (ZT_BENCH_ISA=avx2; OpenBLAS's Haswell kernels)"
elif [[ -n ${ZT_BENCH_ISA:-} ]]; then
  echo "ZT_BENCH_ISA: only avx2 is known, got '$ZT_BENCH_ISA'" >&2
  exit 2
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64  # a PyPI torch's CUDA libraries load

peaks=$(mktemp)
gemms=$(mktemp)
trap 'rm -f "$peaks" "$gemms"' EXIT
ours() {  # ours DTYPE ACTIVATIONS THREADS [LABEL] -> step ms; appends "LABEL peak_bytes" to $peaks
  local out
  out=$(OMP_NUM_THREADS=$3 "$build/tests/bench/bench_train_step" "${model[@]}" --dtype "$1" --activation_dtype "$2" |
    tee >(cat >&2) | tee >(grep -o 'bf16 GEMMs: [^;)]*)\?' | head -1 >"$gemms") | grep '^RESULT')
  echo "${4:-$1/$2} $(sed -n 's/.*peak_bytes=\([0-9]*\).*/\1/p' <<<"$out")" >>"$peaks"
  sed -n 's/^RESULT step_ms=\([0-9.]*\).*/\1/p' <<<"$out"
}
theirs() {  # theirs THREADS -> step ms (0: not run)
  if [[ ${ZT_BENCH_TORCH:-} == skip ]]; then echo 0; return; fi
  local shape=(--threads "$1" --block "$block" --batch "$batch" --steps "$steps" --bf16 1)
  if [[ -n $config ]]; then
    ZT_PYLIB=$pylib "$torch" tests/bench/torch_llama_step.py "$config" "${shape[@]}" 2>&1 | grep -v -i "warn"
  else
    "$torch" tests/bench/torch_gpt2_step.py "${shape[@]}"
  fi | tee >(cat >&2) | sed -n 's/^RESULT torch_step_ms=\([0-9.]*\).*/\1/p'
}
counts=("$threads")
[[ $threads -ne 1 ]] && counts+=(1)
declare -A t
for n in "${counts[@]}"; do
  t[fp32_$n]=$(ours fp32 fp32 "$n")
  t[bf16_$n]=$(ours bf16 fp32 "$n")
  t[bf16act_$n]=$(ours bf16 bf16 "$n")
  if grep -q 'bf16 GEMMs: oneDNN' "$gemms"; then
    t[packs_$n]=$(ZT_BF16_WEIGHT_PACKS=1 ours bf16 bf16 "$n" packs)
  fi
  t[torch_$n]=$(theirs "$n")
done
peak_fp32=$(awk '$1 == "fp32/fp32" {print $2; exit}' "$peaks")
peak_bf16=$(awk '$1 == "bf16/fp32" {print $2; exit}' "$peaks")
peak_bf16act=$(awk '$1 == "bf16/bf16" {print $2; exit}' "$peaks")
peak_packs=$(awk '$1 == "packs" {print $2; exit}' "$peaks")
torch_version=skipped
[[ ${ZT_BENCH_TORCH:-} != skip ]] && torch_version=$("$torch" -c 'import torch; print(torch.__version__)')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
bf16_cpu=0
[[ " $flags " == *" avx512_bf16 "* && ${ZT_BENCH_ISA:-} != avx2 ]] && bf16_cpu=1
in_place=0
grep -q 'bf16 GEMMs: oneDNN' "$gemms" && in_place=1
/usr/bin/python3 - "$bf16_cpu" "$in_place" "$torch_version" "$(cat "$gemms")" <<PY
import sys
bf16_cpu, in_place, version, gemms = sys.argv[1] == "1", sys.argv[2] == "1", sys.argv[3], sys.argv[4]
t = {"fp32": [${t[fp32_$threads]}, ${t[fp32_1]:-${t[fp32_$threads]}}],
     "bf16": [${t[bf16_$threads]}, ${t[bf16_1]:-${t[bf16_$threads]}}],
     "bf16act": [${t[bf16act_$threads]}, ${t[bf16act_1]:-${t[bf16act_$threads]}}],
     "torch": [${t[torch_$threads]}, ${t[torch_1]:-${t[torch_$threads]}}]}
if "${t[packs_$threads]:-}":
    t["packs"] = [${t[packs_$threads]:-0}, ${t[packs_1]:-${t[packs_$threads]:-0}}]
print()
print(f"{'step ms':36s}{'$threads threads':>12s}{'1 thread':>12s}")
skipped = version == "skipped"
default = "bf16act" if bf16_cpu else "bf16"  # what --activation_dtype auto gives a bf16 run here
rows = [("fp32", "zerotrain fp32"), ("bf16", "zerotrain bf16, fp32 activations"),
        ("bf16act", "zerotrain bf16, bf16 activations")]
packs = [("packs", "zerotrain bf16, bf16 act., packs")] if "packs" in t else []
for name, label in rows + packs + ([] if skipped else [("torch", f"pytorch {version} bf16 autocast")]):
    print(f"{label + (' *' if name == default else ''):36s}{t[name][0]:12.1f}{t[name][1]:12.1f}")
print(f"* a bf16 run's default here; {gemms or 'bf16 GEMMs: (not said)'}; {$accumulation} micro-step(s) a step of ours")
best = {k: min(v) for k, v in t.items()}
if packs:
    print(f"weight packs (ZT_BF16_WEIGHT_PACKS=1) / without: step {best['packs'] / best['bf16act']:.3f}, "
          f"peak {${peak_packs:-0} / $peak_bf16act:.2f} (reported, not judged)")
vs_fp32 = best[default] / best["fp32"]
vs_torch = None if skipped else best[default] / best["torch"]
limit_fp32 = 0.7 if in_place else 1.0
print(f"bf16 / our fp32: {vs_fp32:.2f} (target <= {limit_fp32}); bf16 / pytorch bf16: "
      + ("not run (ZT_BENCH_TORCH=skip)" if skipped else f"{vs_torch:.2f} (target <= 0.7)")
      + f"; CPU {'with' if bf16_cpu else 'without'} avx512_bf16{' (ZT_BENCH_ISA=avx2)' if '${ZT_BENCH_ISA:-}' else ''}")
peak = {"fp32": $peak_fp32, "bf16": $peak_bf16, "bf16act": $peak_bf16act}
print("peak device-pool MiB: " + ", ".join(f"{label} {peak[name] / 2**20:.0f}" for name, label in rows))
vs_memory = peak["bf16act"] / peak["fp32"]
print(f"bf16-activation run's peak / fp32 run's: {vs_memory:.2f} (target <= 0.6)")
ok = vs_fp32 <= limit_fp32 and (skipped or vs_torch <= 0.7) and vs_memory <= 0.6
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
