#!/usr/bin/env bash
# End to end: the training step with the optimizer state on NVMe against the same step with it
# in host memory (the compute step, CPU Adam included) plus the optimizer's I/O at fio's
# bandwidth, all measured in this run. A step with no overlap would take compute + I/O; the
# target is <= 1.3x that sum. 50.6 M parameters (16 layers x 512), bf16, ZeRO-3 with parameters
# in host memory, one rank. Settings: ZT_BENCH_DIR (/tmp), ZT_BENCH_THREADS (nproc),
# ZT_BENCH_STEPS (8).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${ZT_BENCH_THREADS:-$(nproc)}
steps=${ZT_BENCH_STEPS:-8}
work=${ZT_BENCH_DIR:-/tmp}/zt_bench_offload.$$
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target zerotrain zero_prepare_data >/dev/null
mkdir -p "$work/nvme"
trap 'rm -rf "$work"' EXIT
build/release/tools/zero_prepare_data share/data/tinyshakespeare.txt --output_dir "$work/data" 2>/dev/null
cat >"$work/model.json" <<'JSON'
{"n_layer": 16, "n_embd": 512, "n_head": 8, "n_positions": 128, "vocab_size": 256}
JSON
block=1048576
depth=8
for device in cpu nvme; do
  cat >"$work/$device.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": 3, "sub_group_size": 4000000,
   "offload_optimizer": {"device": "$device", "nvme_path": "$work/nvme", "pin_memory": true, "buffer_count": 4},
   "offload_param": {"device": "cpu", "pin_memory": true}},
 "aio": {"block_size": $block, "queue_depth": $depth}}
JSON
done
run() {
  OMP_NUM_THREADS=$threads build/release/src/zerotrain --deepspeed "$work/$1.json" --config_name "$work/model.json" \
    --train_data "$work/data/train_*.bin" --output_dir "$work/$1" --overwrite_output_dir --block_size 128 \
    --max_steps "$steps" --disable_tqdm --save_strategy no 2>/dev/null
}
fio_bw() {  # fio_bw RW BYTES
  fio --name=opt --filename="$work/fio.dat" --direct=1 --ioengine=io_uring --bs=$block --iodepth=$depth --rw="$1" \
      --size="$2" --output-format=json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$1']['bw_bytes'])"
}
run cpu
run nvme
bytes=$(/usr/bin/python3 -c "import json; s=json.loads(open('$work/nvme/metrics.jsonl').readline())['offloaded_state_bytes']; print(s['master']+s['exp_avg']+s['exp_avg_sq'])")
wbw=$(fio_bw write "$bytes")
rbw=$(fio_bw read "$bytes")
rm -f "$work/fio.dat"
/usr/bin/python3 - "$work" "$bytes" "$rbw" "$wbw" "$steps" <<'PY'
import json, statistics, sys
work, nbytes, rbw, wbw, steps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
def step_s(name):
    ms = [l["step_ms"] for l in map(json.loads, open(f"{work}/{name}/metrics.jsonl")) if l["event"] == "step"]
    return statistics.median(ms[2:]) / 1e3  # the first two steps warm up
cpu, nvme = step_s("cpu"), step_s("nvme")
io = nbytes / rbw + nbytes / wbw
print(f"optimizer state on NVMe: {nbytes / 2**20:.0f} MiB read and written per step; fio read {rbw / 1e9:.2f} GB/s, "
      f"write {wbw / 1e9:.2f} GB/s -> {io:.2f} s of I/O")
print(f"step: host-memory optimizer {cpu:.2f} s, NVMe optimizer {nvme:.2f} s")
ratio = nvme / (cpu + io)
print(f"NVMe step / (compute step + I/O at fio bandwidth) = {ratio:.2f} (target <= 1.3; 1.0 = no overlap, "
      f"{max(cpu, io) / (cpu + io):.2f} = perfect overlap)")
print("OK" if ratio <= 1.3 else "FAILED")
sys.exit(0 if ratio <= 1.3 else 1)
PY
