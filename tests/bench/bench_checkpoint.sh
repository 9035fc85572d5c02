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
# With --verify_whole_files it reads every byte of the checkpoint (the CRC-32 of every file): the
# throughput judged against the disk. By default it reads only the master weights: timed too.
/usr/bin/time -v build/release/tools/zero_to_fp32 "$dir/ckpt" "$dir/hf" --verify_whole_files 2>"$dir/time.log"
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.log")
elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir/time.log")
drop_caches
rm -rf "$dir/hf"
/usr/bin/time -v build/release/tools/zero_to_fp32 "$dir/ckpt" "$dir/hf" 2>"$dir/time.log"
rss_kb=$(( $(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.log") > rss_kb ?
           $(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.log") : rss_kb ))
elapsed_default=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir/time.log")
/usr/bin/python3 - "$result" "$fio_write" "$fio_read" "$rss_kb" "$elapsed" "$dir" "$elapsed_default" <<'PY'
import os, re, sys
result, fio_w, fio_r, rss_kb, elapsed, d, elapsed_default = sys.argv[1:8]
save, load = (float(re.search(k + r"=([0-9.]+)", result).group(1)) for k in ("save_gbps", "load_gbps"))
fio_w, fio_r = float(fio_w), float(fio_r)
def wall(text):
    return sum(float(p) * 60 ** i for i, p in enumerate(reversed(text.split(":"))))
seconds, seconds_default = wall(elapsed), wall(elapsed_default)
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
print(f"{'zero_to_fp32 --verify_whole_files':34s}")
print(f"{'  model bytes / s':34s}{through:8.3f}{through / fio_r:8.2f}")
print(f"{'  checkpoint bytes / s':34s}{processed:8.3f}{processed / fio_r:8.2f}")
print(f"{'zero_to_fp32 (default), model B/s':34s}{model / seconds_default / 1e9:8.3f}"
      f"{model / seconds_default / 1e9 / fio_r:8.2f}")
print(f"zero_to_fp32: {seconds:.1f} s with --verify_whole_files (it read {ckpt / 1e9:.2f} GB of checkpoint to write "
      f"{model / 1e9:.2f} GB), {seconds_default:.1f} s by default (the master weights only); peak RSS "
      f"{rss / 1e6:.0f} MB vs largest tensor {largest / 1e6:.0f} MB + 256 MB = {(largest + 256e6) / 1e6:.0f} MB")
# The checkpoint bytes --verify_whole_files reads (every file, for the CRC-32 check) per second
# against the disk's read bandwidth; the model bytes per second are printed above for reference.
ok = rss <= largest + 256e6 and processed >= 0.7 * fio_r
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
