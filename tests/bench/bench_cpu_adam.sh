#!/usr/bin/env bash
# CPU Adam side by side (issue 5): our fused kernel, a plain vectorised loop, STREAM triad and
# torch.optim.AdamW (Debian's python3-torch) on 100 M parameters with the same thread count, and
# the fused Lion and Adagrad (issue 31). Targets: fused Adam, Lion and Adagrad >= 80% of triad
# bandwidth; Adam >= 8x torch. Settings: ZT_BENCH_THREADS (nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${ZT_BENCH_THREADS:-$(nproc)}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target bench_cpu_adam >/dev/null
ours=$(OMP_NUM_THREADS=$threads build/release/tests/bench/bench_cpu_adam | tee >(cat >&2) | grep '^RESULT')
torch=$(/usr/bin/python3 tests/bench/torch_adamw_step.py --threads "$threads" | tee >(cat >&2) | grep '^RESULT')
/usr/bin/python3 - "$ours" "$torch" <<'PY'
import re, sys
def num(text, key): return float(re.search(key + r"=([0-9.]+)", text).group(1))
ours, torch = sys.argv[1:3]
fused, gbs, triad, t = num(ours, "fused_mparams"), num(ours, "fused_gbs"), num(ours, "triad_gbs"), num(torch, "torch_mparams")
print(f"fused {fused:.1f} Mparams/s = {fused / t:.1f}x torch AdamW ({t:.1f} Mparams/s), target >= 8x")
print(f"fused {gbs:.2f} GB/s = {gbs / triad:.0%} of triad {triad:.2f} GB/s, target >= 80%")
lion, adagrad = num(ours, "lion_gbs"), num(ours, "adagrad_gbs")
print(f"Lion {lion:.2f} GB/s = {lion / triad:.0%}, Adagrad {adagrad:.2f} GB/s = {adagrad / triad:.0%} of triad, target >= 80%")
ok = fused / t >= 8 and gbs / triad >= 0.8 and lion / triad >= 0.8 and adagrad / triad >= 0.8
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
