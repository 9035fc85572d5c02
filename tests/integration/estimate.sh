#!/usr/bin/env bash
# zero_estimate against the trainer's own measurement: for several stages, precisions, offload
# settings, optimizers and rank counts, the estimated model-state bytes equal what the engine allocated (each
# kind, on the device and offloaded), activations are within 15 %, and the estimated per-pool
# totals are within 15 % of the peaks the pools measured over the run. Also: the DeepSpeed table,
# the GPU view (--accelerator cuda) and bad input.
source "$(dirname "$0")/lib.sh"

ESTIMATE="$ZT_BIN_DIR/tools/zero_estimate"
MPI=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
DATA=$WORK/data
mkdir -p "$WORK/nvme"
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
cat >"$WORK/nvme.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
 "zero_optimization": {"stage": 3, "sub_group_size": 100000, "reduce_bucket_size": "auto",
   "offload_optimizer": {"device": "nvme", "nvme_path": "$WORK/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$WORK/nvme", "max_in_cpu": 50000, "buffer_size": 1e6}}}
JSON

# check NAME RANKS CONFIG FLAGS...: train 3 steps, estimate the same run, compare ($MODEL: the
# model's config.json, GPT-2's demo unless set).
check() {
  local name=$1 ranks=$2 config=$3 model=${MODEL:-$ZT_SOURCE_DIR/configs/models/gpt2-demo.json}
  shift 3
  local flags=(--per_device_train_batch_size 4 --per_device_eval_batch_size 2 --block_size 64 "$@")
  if ! "${MPI[@]}" -np "$ranks" "$ZEROTRAIN" --deepspeed "$config" --config_name "$model" \
      --train_data "$DATA/train_*.bin" --output_dir "$WORK/$name" --max_steps 3 --disable_tqdm "${flags[@]}" \
      >/dev/null 2>"$WORK/$name.log"; then
    fail "$name: training failed: $(tail -2 "$WORK/$name.log")"
    return
  fi
  if ! "$ESTIMATE" --config_name "$model" --deepspeed "$config" \
      --num_gpus_per_node "$ranks" "${flags[@]}" --json >"$WORK/$name.estimate.json" 2>"$WORK/$name.elog"; then
    fail "$name: zero_estimate failed: $(cat "$WORK/$name.elog")"
    return
  fi
  /usr/bin/python3 - "$WORK/$name/metrics.jsonl" "$WORK/$name.estimate.json" "$name" <<'PY' && pass "$name: model states exact, activations and pools within 15 %" || fail "$name"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
start, end = lines[0], lines[-1]
est = json.load(open(sys.argv[2]))["estimate"]
name = sys.argv[3]
for key in ("model_state_bytes", "offloaded_state_bytes"):
    assert est[key] == start[key], (key, est[key], start[key])
# The start event counts the model's arrays; the estimate also the CPU bf16 kernels' scratch.
act_e, act_m = est["activation_bytes"] - est["kernel_scratch_bytes"], start["activation_bytes"]
assert abs(act_e - act_m) <= 0.15 * act_m, ("activations", act_e, act_m)
measured = end["pool_peak_bytes"]
report = []
for pool in ("device", "host", "pinned", "nvme"):
    e, m = est["pool_bytes"][pool], measured[pool]
    report.append(f"{pool} {e / 2**20:.2f}/{m / 2**20:.2f} MiB")
    assert abs(e - m) <= 0.15 * max(m, 1 << 20), (pool, e, m)
print(f"{name}: estimate/measured {', '.join(report)}")
PY
}
check stage0_fp32 1 "$ZT_SOURCE_DIR/configs/zero0.json"
check stage1_fp32 2 "$ZT_SOURCE_DIR/configs/zero1.json"
check stage2_bf16_offload 2 "$ZT_SOURCE_DIR/configs/zero2_offload_cpu.json" --bf16
# --delayed_param_update's host copy of the new parameters (zero_estimate takes the flag too).
check stage2_bf16_offload_delayed 2 "$ZT_SOURCE_DIR/configs/zero2_offload_cpu.json" --bf16 --delayed_param_update
check stage3_bf16_ckpt 2 "$ZT_SOURCE_DIR/configs/zero3.json" --bf16 --gradient_checkpointing
check stage3_nvme 2 "$WORK/nvme.json" --bf16
# Lion and Adagrad (issue 31): one moment each, chosen by HF's --optim (zero_estimate takes it too).
cat >"$WORK/offload_noopt.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
JSON
check stage2_bf16_offload_adagrad 2 "$WORK/offload_noopt.json" --bf16 --optim adagrad
check stage3_nvme_lion 2 "$WORK/nvme.json" --bf16 --optim lion_32bit
# The Llama family (issue 16): grouped-query attention, SwiGLU, an untied lm_head.
MODEL=$ZT_SOURCE_DIR/configs/models/llama-demo.json check llama_stage2_fp32 2 "$ZT_SOURCE_DIR/configs/zero2.json"
MODEL=$ZT_SOURCE_DIR/configs/models/llama-demo.json check llama_stage3_bf16_ckpt 2 "$ZT_SOURCE_DIR/configs/zero3.json" \
  --bf16 --gradient_checkpointing
MODEL=$ZT_SOURCE_DIR/configs/models/llama-demo.json check llama_stage3_nvme 2 "$WORK/nvme.json" --bf16

# DeepSpeed's own printed table for t5-small (60506624 params, largest layer 32128 x 512),
# from DeepSpeed's estimate_zero3_model_states_mem_needs_all_live on that model.
"$ESTIMATE" --stage 3 --params 60506624 --largest_layer_params 16449536 >"$WORK/t5.txt" 2>&1
cat >"$WORK/t5.expected" <<'TXT'
Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 1 GPU per node.
SW: Model with 60M total params, 16M largest layer params.
  per CPU  |  per GPU |   Options
    1.52GB |   0.06GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
    1.52GB |   0.06GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
    1.35GB |   0.17GB | offload_param=none, offload_optimizer=cpu , zero_init=1
    1.35GB |   0.17GB | offload_param=none, offload_optimizer=cpu , zero_init=0
    0.09GB |   1.08GB | offload_param=none, offload_optimizer=none, zero_init=1
    0.34GB |   1.08GB | offload_param=none, offload_optimizer=none, zero_init=0
TXT
if diff "$WORK/t5.expected" "$WORK/t5.txt" >"$WORK/t5.diff"; then pass "DeepSpeed's t5-small table, line for line"; else fail "t5-small table: $(cat "$WORK/t5.diff")"; fi

# Bad input: one line, exit 2.
# Huge counts: a quadrillion parameters is a valid (positive) table, 18 bytes x 1.5 per parameter
# in its first row; past 2^62 bytes a row is an error, never a negative size (it wrapped to
# -8589934592.00GB before).
"$ESTIMATE" --stage 3 --params 1e15 --largest_layer_params 1e12 >"$WORK/huge.txt" 2>&1
if grep -q '^ 25145709.51GB | 3725.29GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1$' "$WORK/huge.txt" &&
   ! grep -q -- '-[0-9]' "$WORK/huge.txt"; then
  pass "a quadrillion parameters: DeepSpeed's table, every size positive"
else
  fail "huge table: $(cat "$WORK/huge.txt")"
fi
expect_usage_error "a parameter count beyond any machine" \
  "^zero_estimate: error: --params: the estimate is [0-9.]+ EiB per CPU or GPU, beyond any machine" \
  "$ESTIMATE" --stage 3 --params 1e18 --largest_layer_params 1e15
expect_usage_error "negative size" "^zero_estimate: .*--params: must be positive, got '-5M'" "$ESTIMATE" --stage 2 --params=-5M
expect_usage_error "unknown suffix" "^zero_estimate: .*--params: unknown suffix 'X' in '7X'" "$ESTIMATE" --stage 2 --params 7X
expect_usage_error "missing model" "^zero_estimate: .*--params N .* or as --config_name" "$ESTIMATE" --stage 2
expect_usage_error "stage 3 without L" "^zero_estimate: .*--stage 3 needs --largest_layer_params" "$ESTIMATE" --stage 3 --params 1B
expect_usage_error "half the hardware" "^zero_estimate: .*needs both --gpu_memory and --cpu_memory" \
  "$ESTIMATE" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --gpu_memory 80GB
expect_usage_error "bad memory suffix" "^zero_estimate: .*--gpu_memory: unknown suffix 'GiG'" \
  "$ESTIMATE" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --gpu_memory 80GiG --cpu_memory 1TB
expect_usage_error "missing value" "^zero_estimate: .*--num_nodes" "$ESTIMATE" --stage 2 --params 1B --num_nodes
# A config that cannot be read is the only output, even where DeepSpeed's table (--stage 2) would
# print first.
expect_usage_error "unreadable --deepspeed" "^zero_estimate: error: .*nosuch.json: cannot open file" \
  "$ESTIMATE" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --stage 2 --deepspeed "$WORK/nosuch.json"
printed=$("$ESTIMATE" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --stage 2 \
  --deepspeed "$WORK/nosuch.json" 2>/dev/null)
[[ -z $printed ]] && pass "unreadable --deepspeed: nothing on stdout" || fail "unreadable --deepspeed printed: $printed"
expect_usage_error "--delayed_param_update with --params" \
  "^zero_estimate: .*--delayed_param_update needs --config_name: DeepSpeed's tables \(--params\)" \
  "$ESTIMATE" --stage 2 --params 1B --delayed_param_update
expect_usage_error "--delayed_param_update without --deepspeed" \
  "^zero_estimate: .*--delayed_param_update needs --deepspeed CONFIG with offload_optimizer" \
  "$ESTIMATE" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --stage 2 --delayed_param_update
# The recommender with --delayed_param_update offers only the rungs that can run it (the optimizer
# offloaded, the parameters not), each holding the pending parameters' host copy (2 bytes a
# parameter in bf16): at 80 GB stage 0 fits without the flag and stage 2 + optimizer offload with
# it; at 35 MB both choose stage 2 + optimizer offload. fp32 activations: the default would be bf16
# on a CPU with bf16 instructions, and the sizes above are fp32's.
REC=(--config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --deepspeed "$ZT_SOURCE_DIR/configs/zero2_offload_cpu.json"
     --bf16 --activation_dtype fp32 --block_size 64 --per_device_train_batch_size 4 --cpu_memory 16GB --json)
ok=1
for gpu in 35MB 80GB; do
  "$ESTIMATE" "${REC[@]}" --gpu_memory $gpu --delayed_param_update >"$WORK/rec_dpu_$gpu.json" 2>"$WORK/rec.err" &&
    "$ESTIMATE" "${REC[@]}" --gpu_memory $gpu >"$WORK/rec_$gpu.json" 2>>"$WORK/rec.err" || { ok=0; fail "recommender at $gpu: $(cat "$WORK/rec.err")"; }
done
((ok)) && /usr/bin/python3 - "$WORK" <<'PY' && pass "recommender with --delayed_param_update" || fail "recommender with --delayed_param_update"
import json, sys
w = sys.argv[1]
def load(name):
    return json.load(open(f"{w}/{name}.json"))
name = "stage 2 + optimizer offload (cpu)"
for gpu, plain_choice in (("35MB", name), ("80GB", "stage 0")):
    dpu, plain = load(f"rec_dpu_{gpu}"), load(f"rec_{gpu}")
    assert plain["recommendation"]["chosen"] == plain_choice, plain["recommendation"]["chosen"]
    assert dpu["recommendation"]["chosen"] == name, dpu["recommendation"]["chosen"]
    for r in dpu["recommendation"]["ladder"]:
        assert "optimizer" in r["rung"] and "parameter" not in r["rung"], r["rung"]
# The ladder stops at the first rung that fits: at 35 MB both reach this one.
rung = lambda d: next(r for r in d["recommendation"]["ladder"] if r["rung"] == name)
dpu, plain = load("rec_dpu_35MB"), load("rec_35MB")
extra = rung(dpu)["estimate"]["pool_bytes"]["pinned"] - rung(plain)["estimate"]["pool_bytes"]["pinned"]
assert abs(extra - 2 * dpu["num_params"]) < 4096, extra
PY

# The GPU view (--accelerator cuda): GPU memory per rank with the allocator's rounding and the
# fixed costs; NCCL's buffers only with more than one rank; --gpu_memory alone gives a verdict on
# the estimated run (exit 1 when it does not fit).
DEMO=(--config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --block_size 64 --bf16)
"$ESTIMATE" "${DEMO[@]}" --stage 3 --accelerator cuda --num_gpus_per_node 2 --gpu_memory 80GB >"$WORK/gpu.txt" 2>&1
rc=$?
if [[ $rc -eq 0 ]] && grep -q '^GPU memory per rank' "$WORK/gpu.txt" &&
   grep -Eq '^  allocator rounding +[0-9.]+ MiB' "$WORK/gpu.txt" &&
   grep -Eq '^  CUDA context \+ cuBLASLt +532\.0 MiB$' "$WORK/gpu.txt" &&
   grep -Eq '^  NCCL buffers +256\.0 MiB$' "$WORK/gpu.txt" && grep -Eq '^  total +[0-9.]+ MiB$' "$WORK/gpu.txt" &&
   grep -Eq '^fits: [0-9.]+ GiB of 80\.00 GiB GPU memory' "$WORK/gpu.txt"; then
  pass "--accelerator cuda: GPU memory per rank, its parts and the verdict"
else
  fail "--accelerator cuda (rc $rc): $(cat "$WORK/gpu.txt")"
fi
"$ESTIMATE" "${DEMO[@]}" --stage 0 --accelerator cuda >"$WORK/gpu1.txt" 2>&1
if grep -Eq '^  NCCL buffers +0\.0 MiB  \(one rank: none\)$' "$WORK/gpu1.txt" && ! grep -q '^fits' "$WORK/gpu1.txt"; then
  pass "--accelerator cuda, one rank: no NCCL buffers, no verdict without --gpu_memory"
else
  fail "one rank GPU view: $(cat "$WORK/gpu1.txt")"
fi
"$ESTIMATE" "${DEMO[@]}" --stage 0 --accelerator cuda --gpu_memory 512MB >"$WORK/gpu_small.txt" 2>&1
rc=$?
if [[ $rc -eq 1 ]] && grep -Eq '^does not fit: [0-9.]+ GiB > 0\.50 GiB GPU memory, [0-9.]+ MiB short$' "$WORK/gpu_small.txt"; then
  pass "--accelerator cuda --gpu_memory 512MB: does not fit, exit 1"
else
  fail "GPU verdict (rc $rc): $(cat "$WORK/gpu_small.txt")"
fi
if "$ESTIMATE" "${DEMO[@]}" --stage 2 --accelerator cuda --num_gpus_per_node 2 --gpu_memory 80GB --json |
   /usr/bin/python3 -c '
import json, sys
g = json.load(sys.stdin)["gpu_memory_per_rank"]
parts = ("model_states", "buffers", "activations", "allocator_rounding", "cuda_context_and_cublaslt", "nccl_buffers")
assert g["total"] == sum(g[k] for k in parts), g
assert g["fits"] and g["gpu_memory"] == 80 << 30 and g["nccl_buffers"] > 0, g'; then
  pass "--accelerator cuda --json: the parts add up to the total"
else
  fail "--accelerator cuda --json"
fi
"$ESTIMATE" "${DEMO[@]}" --stage 1 >"$WORK/cpu_view.txt" 2>&1
if ! grep -q 'GPU memory per rank' "$WORK/cpu_view.txt"; then pass "the default stays the CPU view"; else fail "CPU view shows the GPU's"; fi
expect_usage_error "bad --gpu_memory" "^zero_estimate: error: --gpu_memory: unknown suffix 'GiG'" \
  "$ESTIMATE" "${DEMO[@]}" --stage 1 --accelerator cuda --gpu_memory 80GiG
expect_usage_error "unknown accelerator" "^zero_estimate: error: --accelerator \"tpu\": choose one of cpu, emulated, cuda" \
  "$ESTIMATE" "${DEMO[@]}" --stage 1 --accelerator tpu
expect_usage_error "GPU view without a model" "^zero_estimate: .*--accelerator cuda needs --config_name" \
  "$ESTIMATE" --stage 2 --params 1B --accelerator cuda
finish
