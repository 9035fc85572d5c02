#!/usr/bin/env bash
# ZeRO-Offload and ZeRO-Infinity through the trainer, as a user runs them:
#  - cpu and nvme optimizer offload (2 ranks) give the same per-step losses as no offload, and
#    metrics.jsonl shows where the bytes went;
#  - checkpoints save from and resume into an NVMe-offloaded optimizer;
#  - --delayed_param_update: the undelayed run's first steps, learning, and a resume that goes on
#    as the uninterrupted run;
#  - a missing or full nvme_path is a one-line error at start-up, before anything is written;
#  - a model whose optimizer state is bigger than a RAM budget trains from NVMe with its peak RSS,
#    measured by the kernel for the child process, under that budget;
#  - running out of disk space while saving ends the job with a clear error and leaves the last
#    checkpoint intact (a small tmpfs in a private mount namespace).
source "$(dirname "$0")/lib.sh"

MPI=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
DATA=$WORK/data
NVME=$WORK/nvme
mkdir -p "$NVME"
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null

# config NAME STAGE OPTIMIZER_DEVICE PARAM_DEVICE [EXTRA_ZERO_JSON]: writes $WORK/NAME.json.
config() {
  local name=$1 stage=$2 opt=$3 param=$4 extra=${5:-}
  local offload=""
  [[ $opt != none ]] && offload+=", \"offload_optimizer\": {\"device\": \"$opt\", \"nvme_path\": \"$NVME\", \"pin_memory\": true}"
  [[ $param != none ]] && offload+=", \"offload_param\": {\"device\": \"$param\", \"nvme_path\": \"$NVME\", \"max_in_cpu\": 100000}"
  cat >"$WORK/$name.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear"}},
 "zero_optimization": {"stage": $stage, "overlap_comm": true, "reduce_bucket_size": 20000,
                       "sub_group_size": 30000 $offload $extra},
 "aio": {"block_size": 65536, "queue_depth": 8}}
JSON
}
train() {  # train CONFIG OUT RANKS EXTRA_FLAGS...
  local cfg=$1 out=$2 ranks=$3
  shift 3
  "${MPI[@]}" -np "$ranks" "$ZEROTRAIN" --deepspeed "$WORK/$cfg.json" \
    --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --train_data "$DATA/train_*.bin" \
    --output_dir "$out" --block_size 64 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 \
    --learning_rate 3e-3 --weight_decay 0.1 --disable_tqdm --bf16 "$@"
}

# ---- the same losses with and without offload ----
config s2 2 none none
config s2_cpu 2 cpu none
config s3 3 none none
config s3_nvme 3 nvme nvme ", \"stage3_gather_16bit_weights_on_model_save\": true"
train s2 "$WORK/s2" 2 --max_steps 20 2>"$WORK/s2.log" || fail "stage 2: $(tail -3 "$WORK/s2.log")"
train s2_cpu "$WORK/s2_cpu" 2 --max_steps 20 2>"$WORK/s2_cpu.log" || fail "stage 2 cpu offload: $(tail -3 "$WORK/s2_cpu.log")"
train s3 "$WORK/s3" 2 --max_steps 20 2>"$WORK/s3.log" || fail "stage 3: $(tail -3 "$WORK/s3.log")"
train s3_nvme "$WORK/s3_nvme" 2 --max_steps 20 2>"$WORK/s3_nvme.log" || fail "stage 3 nvme: $(tail -3 "$WORK/s3_nvme.log")"
/usr/bin/python3 - "$WORK" <<'PY' && pass "cpu and nvme offload: the same 20 losses as no offload; bytes where they belong" || fail "offload losses or accounting"
import json, sys
w = sys.argv[1]
def read(name):
    return [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
for base, off in (("s2", "s2_cpu"), ("s3", "s3_nvme")):
    a = [l["loss"] for l in read(base) if l["event"] == "step"]
    b = [l["loss"] for l in read(off) if l["event"] == "step"]
    assert len(a) == 20 and a == b, (base, a[:3], b[:3])
    assert a[-1] < a[0] - 0.5, a
s2, s2c = read("s2")[0], read("s2_cpu")[0]
n = s2["world_size"]
dev, off = s2c["model_state_bytes"], s2c["offloaded_state_bytes"]
assert s2c["offload"]["optimizer"] == "cpu"
# Stage 2 + cpu offload: the device keeps the bf16 parameters (2 psi) and a gradient partition (2 psi / N).
assert dev["master"] == dev["exp_avg"] == dev["exp_avg_sq"] == 0, dev
assert dev["params"] == s2["model_state_bytes"]["params"] and dev["grads"] == s2["model_state_bytes"]["grads"], dev
assert off["master"] == s2["model_state_bytes"]["master"] and off["exp_avg"] == s2["model_state_bytes"]["exp_avg"], off
steps = [l for l in read("s2_cpu") if l["event"] == "step"]
assert steps[-1]["pool_peak_bytes"]["pinned"] >= off["master"] * 3, steps[-1]["pool_peak_bytes"]
s3n = read("s3_nvme")
st = s3n[0]
assert st["model_state_bytes"]["params"] == 0 and st["model_state_bytes"]["master"] == 0, st["model_state_bytes"]
nvme_steps = [l for l in s3n if l["event"] == "step"]
assert nvme_steps[-1]["pool_peak_bytes"]["nvme"] >= 3 * st["offloaded_state_bytes"]["exp_avg"], nvme_steps[-1]
print("stage 2 cpu: device", dev, "offloaded", off)
PY
left=$(find "$NVME" -mindepth 1 | wc -l)
[[ $left -eq 0 ]] && pass "nvme_path is empty after the runs" || fail "$left files left in nvme_path"

# ---- checkpoints from and into NVMe-offloaded state ----
train s3_nvme "$WORK/ck" 2 --max_steps 10 --save_steps 5 2>"$WORK/ck.log" || fail "nvme save: $(tail -3 "$WORK/ck.log")"
train s3_nvme "$WORK/ck" 2 --max_steps 20 --resume_from_checkpoint auto 2>"$WORK/ck2.log" || fail "nvme resume: $(tail -3 "$WORK/ck2.log")"
/usr/bin/python3 - "$WORK/ck/metrics.jsonl" "$WORK/s3_nvme/metrics.jsonl" <<'PY' && pass "save at step 10 with nvme offload, resume to 20: the uninterrupted run's losses" || fail "nvme checkpoint resume"
import json, sys
resumed = {l["step"]: l["loss"] for l in map(json.loads, open(sys.argv[1])) if l["event"] == "step"}
straight = {l["step"]: l["loss"] for l in map(json.loads, open(sys.argv[2])) if l["event"] == "step"}
assert sorted(resumed) == list(range(1, 21)), sorted(resumed)
for s in range(11, 21):
    assert resumed[s] == straight[s], (s, resumed[s], straight[s])
PY

# ---- the delayed parameter update: the same first steps, learns, resumes as uninterrupted ----
DPU=(--delayed_param_update --delayed_param_update_warmup 3)
train s2_cpu "$WORK/dpu" 2 --max_steps 20 --save_steps 10 "${DPU[@]}" 2>"$WORK/dpu.log" || fail "delayed update: $(tail -3 "$WORK/dpu.log")"
train s2_cpu "$WORK/dpu_ck" 2 --max_steps 10 --save_steps 10 "${DPU[@]}" 2>"$WORK/dpu_ck.log" || fail "delayed update, to step 10: $(tail -3 "$WORK/dpu_ck.log")"
train s2_cpu "$WORK/dpu_ck" 2 --max_steps 20 --save_steps 10 --resume_from_checkpoint auto "${DPU[@]}" \
  2>"$WORK/dpu_ck2.log" || fail "delayed update, resumed: $(tail -3 "$WORK/dpu_ck2.log")"
/usr/bin/python3 - "$WORK" <<'PY' && pass "--delayed_param_update: steps 1-4 as undelayed, learns, a resume at step 10 gives the same steps 11-20" || fail "delayed parameter update"
import json, sys
w = sys.argv[1]
def read(name):
    return [json.loads(l) for l in open(f"{w}/{name}/metrics.jsonl")]
def losses(lines):
    return {l["step"]: l["loss"] for l in lines if l["event"] == "step"}
straight, dpu, resumed = losses(read("s2_cpu")), losses(read("dpu")), losses(read("dpu_ck"))
# Steps 1-3 are the warm-up; step 4 is the first delayed one, whose forward still sees model 3.
for s in range(1, 5):
    assert dpu[s] == straight[s], (s, dpu[s], straight[s])
assert dpu[6] != straight[6], "step 6 saw the undelayed model"
assert dpu[20] < dpu[1] - 0.5, dpu
# The checkpoint at step 10 holds every update, and the run that saved it went on from there.
for s in range(11, 21):
    assert resumed[s] == dpu[s], (s, resumed[s], dpu[s])
start, plain = read("dpu")[0], read("s2_cpu")[0]
assert start["offload"]["delayed_param_update_after"] == 3 and plain["offload"]["delayed_param_update_after"] is None
# The pending parameters' host copy: bf16, one per offloaded element (the partition).
partition = start["offloaded_state_bytes"]["master"] // 4
extra = start["buffer_bytes"]["offload"] - plain["buffer_bytes"]["offload"]
assert extra == 2 * partition, (extra, partition)
PY
config s3_nvme_param 3 cpu nvme
expect_usage_error_mpi "--delayed_param_update with offload_param" \
  "--delayed_param_update with zero_optimization.offload_param is not implemented: .*s3_nvme_param.json" \
  train s3_nvme_param "$WORK/bad_dpu" 2 --max_steps 2 "${DPU[@]}"

# ---- bad nvme_path: one line at start-up, nothing written ----
config missing 3 nvme none
sed -i "s|\"nvme_path\": \"$NVME\"|\"nvme_path\": \"$WORK/no/such/dir\"|" "$WORK/missing.json"
expect_usage_error_mpi "missing nvme_path" "zero_optimization.offload_optimizer.nvme_path: .*no/such/dir: No such file" \
  train missing "$WORK/bad1" 2 --max_steps 2
[[ ! -e $WORK/bad1/metrics.jsonl ]] && pass "missing nvme_path: no metrics.jsonl" || fail "missing nvme_path wrote metrics.jsonl"
if unshare -m true 2>/dev/null; then
  # A 64 KiB tmpfs cannot hold the demo model's 8 MB of optimizer state.
  config full 3 nvme none
  out=$(unshare -m bash -c "mount -t tmpfs -o size=64k tmpfs '$NVME' && $(declare -p MPI); $(declare -f train); \
        WORK='$WORK' DATA='$DATA' ZEROTRAIN='$ZEROTRAIN' ZT_SOURCE_DIR='$ZT_SOURCE_DIR'; train full '$WORK/bad2' 2 --max_steps 2" 2>&1)
  rc=$?
  line=$(grep '^zerotrain: ' <<<"$out" | head -5)
  if [[ $rc -eq 2 && $(grep -c . <<<"$line") -eq 1 ]] && grep -qE 'offload_optimizer.nvme_path: .*needs [0-9]+ bytes .* only [0-9]+ are free' <<<"$line"; then
    pass "full nvme_path: one line at start-up ($line)"
  else
    fail "full nvme_path (exit $rc): $out"
  fi
else
  fail "unshare -m is not permitted here: the full-disk checks cannot run"
fi

# ---- larger than memory: optimizer state on NVMe bigger than the RAM budget ----
# 16 layers x 512 wide: 50.6 M parameters, 624 MB of fp32 master weights and moments, against a
# 450 MiB budget for the whole process (bf16 parameters and gradients in host memory, 4 swap
# buffers of 12 MB, checkpointed activations, MPI).
cat >"$WORK/big_model.json" <<'JSON'
{"n_layer": 16, "n_embd": 512, "n_head": 8, "n_positions": 64, "vocab_size": 256}
JSON
cat >"$WORK/big.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1000000, "reduce_bucket_size": 2000000,
   "stage3_max_live_parameters": 5000000,
   "stage3_prefetch_bucket_size": 3200000,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$NVME", "buffer_count": 4},
   "offload_param": {"device": "cpu"}}}
JSON
/usr/bin/python3 - "$ZEROTRAIN" "$WORK" "$DATA" <<'PY' && pass "optimizer state > RAM budget trains from NVMe under the budget" || fail "larger than memory"
import json, resource, subprocess, sys
zerotrain, work, data = sys.argv[1:4]
budget = 450 * 2**20
cmd = [zerotrain, "--deepspeed", f"{work}/big.json", "--config_name", f"{work}/big_model.json",
       "--train_data", f"{data}/train_*.bin", "--output_dir", f"{work}/big", "--block_size", "64",
       "--max_steps", "3", "--disable_tqdm", "--gradient_checkpointing", "--per_device_eval_batch_size", "2",
       "--save_strategy", "no"]
run = subprocess.run(cmd, capture_output=True, text=True, env={"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
assert run.returncode == 0, run.stderr[-2000:]
peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
lines = [json.loads(l) for l in open(f"{work}/big/metrics.jsonl")]
start = lines[0]
state = sum(start["offloaded_state_bytes"][k] for k in ("master", "exp_avg", "exp_avg_sq"))
losses = [l["loss"] for l in lines if l["event"] == "step"]
print(f"psi {start['num_params']/1e6:.1f} M, optimizer state on NVMe {state/2**20:.0f} MiB, "
      f"budget {budget/2**20:.0f} MiB, peak RSS {peak_rss/2**20:.0f} MiB, losses {losses}")
assert state > budget, "the optimizer state must exceed the budget for this test to mean anything"
assert peak_rss < budget, peak_rss
assert len(losses) == 3 and all(l == l for l in losses)
PY

# ---- out of disk space while saving: a clear error, the last checkpoint intact ----
if unshare -m true 2>/dev/null; then
  config ck_cpu 2 cpu none
  # The demo model's checkpoint is 12 MB at 2 ranks: a 16 MB tmpfs holds one, not two.
  out=$(unshare -m bash -c "mkdir -p '$WORK/small' && mount -t tmpfs -o size=16m tmpfs '$WORK/small' && \
        $(declare -p MPI); $(declare -f train); WORK='$WORK' DATA='$DATA' ZEROTRAIN='$ZEROTRAIN' \
        ZT_SOURCE_DIR='$ZT_SOURCE_DIR'; train ck_cpu '$WORK/small/run' 2 --max_steps 10 --save_steps 5 2>&1; echo \"rc=\$?\"; ls '$WORK/small/run'; cat '$WORK/small/run/latest'; \
        '$ZT_BIN_DIR/tools/zero_to_fp32' '$WORK/small/run' '$WORK/export' 2>&1 | tail -1" 2>&1)
  echo "$out" | tail -12
  if grep -q '^rc=1' <<<"$out" && grep -q 'No space left on device' <<<"$out" && grep -qx 'global_step5' <<<"$out" &&
     [[ -f $WORK/export/model.safetensors ]]; then
    pass "ENOSPC while saving step 10: exit 1 naming the cause; latest = global_step5, which still exports"
  else
    fail "ENOSPC while saving"
  fi
fi
finish
