#!/usr/bin/env bash
# Checkpoint I/O side by side with fio on the same disk, in one run: save and load throughput
# against fio's sequential buffered write (+fsync) and cold read, and zero_to_fp32's peak RSS
# (/usr/bin/time -v) and throughput for a GPT-2-medium shape (355 M parameters: 1.4 GB of fp32
# master weights; the largest tensor, wte, is 206 MB).
# Targets (issue 4): zero_to_fp32 peak RSS <= largest tensor + 256 MB; its throughput >= 70% of
# the disk's read bandwidth.
# Settings: ZT_BENCH_DIR (default /tmp/zt_bench_checkpoint; must be on the disk to measure).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${ZT_BENCH_DIR:-/tmp/zt_bench_checkpoint}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_checkpoint zero_to_fp32 >/dev/null
mkdir -p "$dir"
drop_caches() { sync; (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null || echo "# (cannot drop caches: reads may be warm)"; }

fio_write=$(fio --name=w --filename="$dir/fio.dat" --rw=write --bs=1M --size=4G --ioengine=psync --end_fsync=1 \
  --output-format=terse | awk -F';' '{print $48 * 1024 / 1e9}')
drop_caches
fio_read=$(fio --name=r --filename="$dir/fio.dat" --rw=read --bs=1M --size=4G --ioengine=psync \
  --output-format=terse | awk -F';' '{print $7 * 1024 / 1e9}')
rm -f "$dir/fio.dat"

result=$(build/release/tests/bench/bench_checkpoint "$dir/ckpt" | tee >(cat >&2) | grep '^RESULT')
drop_caches
rm -rf "$dir/hf"
/usr/bin/time -v build/release/tools/zero_to_fp32 "$dir/ckpt" "$dir/hf" 2>"$dir/time.log"
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.log")
elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir/time.log")
/usr/bin/python3 - "$result" "$fio_write" "$fio_read" "$rss_kb" "$elapsed" "$dir" <<'PY'
import os, re, sys
result, fio_w, fio_r, rss_kb, elapsed, d = sys.argv[1:7]
save, load = (float(re.search(k + r"=([0-9.]+)", result).group(1)) for k in ("save_gbps", "load_gbps"))
fio_w, fio_r = float(fio_w), float(fio_r)
parts = [float(x) for x in elapsed.split(":")]
seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
model = os.path.getsize(os.path.join(d, "hf", "model.safetensors"))
ckpt = sum(os.path.getsize(os.path.join(root, f)) for root, _, fs in os.walk(os.path.join(d, "ckpt")) for f in fs)
largest = 50257 * 1024 * 4
rss = int(rss_kb) * 1024
print()
print(f"{'':34s}{'GB/s':>8s}{'vs fio':>8s}")
print(f"{'fio sequential write + fsync':34s}{fio_w:8.3f}")
print(f"{'fio sequential read (cold)':34s}{fio_r:8.3f}")
print(f"{'checkpoint save':34s}{save:8.3f}{save / fio_w:8.2f}")
print(f"{'checkpoint load (cold)':34s}{load:8.3f}{load / fio_r:8.2f}")
through = model / seconds / 1e9
processed = ckpt / seconds / 1e9
print(f"{'zero_to_fp32 (model bytes / s)':34s}{through:8.3f}{through / fio_r:8.2f}")
print(f"{'zero_to_fp32 (checkpoint bytes / s)':34s}{processed:8.3f}{processed / fio_r:8.2f}")
print(f"zero_to_fp32: {seconds:.1f} s, peak RSS {rss / 1e6:.0f} MB vs largest tensor {largest / 1e6:.0f} MB + 256 MB"
      f" = {(largest + 256e6) / 1e6:.0f} MB; it read {ckpt / 1e9:.2f} GB of checkpoint (CRC of every file) "
      f"to write {model / 1e9:.2f} GB")
# The checkpoint bytes it reads (every file, for the CRC-32 check) per second against the disk's
# read bandwidth; the model bytes per second are printed above for reference.
ok = rss <= largest + 256e6 and processed >= 0.7 * fio_r
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
