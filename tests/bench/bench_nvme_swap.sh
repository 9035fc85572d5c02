#!/usr/bin/env bash
# The NVMe swapper against fio (Debian's) at the same block size and queue depth, O_DIRECT,
# io_uring, on the same directory and file size: three alternating rounds, medians compared.
# Target: >= 90% of fio's read and write GB/s. Settings: ZT_BENCH_DIR (/tmp), ZT_BENCH_GIB (2),
# ZT_BENCH_BLOCK (1048576), ZT_BENCH_DEPTH (8).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${ZT_BENCH_DIR:-/tmp}/zt_bench_swap.$$
gib=${ZT_BENCH_GIB:-2}
block=${ZT_BENCH_BLOCK:-1048576}
depth=${ZT_BENCH_DEPTH:-8}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_nvme_swap >/dev/null
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
results=()
for round in 1 2 3; do
  for rw in write read; do
    bw=$(fio --name=swap --filename="$dir/fio.dat" --direct=1 --ioengine=io_uring --bs="$block" --iodepth="$depth" \
             --rw=$rw --size="${gib}G" --output-format=json 2>/dev/null |
         /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$rw']['bw_bytes'] / 1e9)")
    echo "round $round: fio $rw $bw GB/s"
    results+=("fio_$rw=$bw")
  done
  rm -f "$dir/fio.dat"
  ours=$(build/release/tests/bench/bench_nvme_swap --dir "$dir" --gib "$gib" --block_size "$block" \
           --queue_depth "$depth" --reps 1 | tee >(cat >&2) | grep '^RESULT')
  results+=("$ours")
done
/usr/bin/python3 - "${results[@]}" <<'PY'
import re, statistics, sys
text = " ".join(sys.argv[1:])
def med(key): return statistics.median(float(v) for v in re.findall(key + r"=([0-9.]+)", text))
fr, fw, sr, sw = med("fio_read"), med("fio_write"), med("swap_read_gbs"), med("swap_write_gbs")
print(f"read:  swapper {sr:.3f} GB/s vs fio {fr:.3f} GB/s = {sr / fr:.0%} (target >= 90%)")
print(f"write: swapper {sw:.3f} GB/s vs fio {fw:.3f} GB/s = {sw / fw:.0%} (target >= 90%)")
ok = sr / fr >= 0.9 and sw / fw >= 0.9
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
