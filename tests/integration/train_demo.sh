#!/usr/bin/env bash
# The demo model on the shipped corpus: eval loss goes from about ln 256 = 5.55 to below 2.5
# nats, metrics.jsonl has the documented events and fields, and the bf16 and fp16 paths train
# too.
source "$(dirname "$0")/lib.sh"

DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
run() {
  local out=$1
  shift
  "$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero0.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --eval_data "$DATA/val_*.bin" --output_dir "$out" \
    --block_size 128 --per_device_train_batch_size 16 --learning_rate 3e-3 --warmup_steps 20 --weight_decay 0.1 \
    --do_eval --eval_on_start --max_eval_samples 256 --disable_tqdm "$@"
}

if run "$WORK/fp32" --max_steps 300 --eval_steps 150 2>"$WORK/fp32.log"; then pass "fp32 run exits 0"; else fail "fp32 run: $(tail -3 "$WORK/fp32.log")"; fi
/usr/bin/python3 - "$WORK/fp32/metrics.jsonl" <<'PY' && pass "fp32 converges; metrics.jsonl complete" || fail "fp32 metrics"
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
events = [l["event"] for l in lines]
assert events[0] == "start" and events[-1] == "end", events[:3]
start = lines[0]
for key in ("world_size", "stage", "dtype", "num_params", "model_state_bytes", "buffer_bytes"):
    assert key in start, key
assert set(start["model_state_bytes"]) == {"params", "grads", "master", "exp_avg", "exp_avg_sq"}
steps = [l for l in lines if l["event"] == "step"]
assert len(steps) == 300, len(steps)
for key in ("step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "step_ms", "tokens_per_s", "pool_peak_bytes"):
    assert key in steps[-1], key
assert set(steps[-1]["pool_peak_bytes"]) == {"device", "host", "pinned", "nvme"}
evals = [l for l in lines if l["event"] == "eval"]
assert [e["step"] for e in evals] == [0, 150, 300], [e["step"] for e in evals]
first, last = evals[0]["eval_loss"], evals[-1]["eval_loss"]
print(f"eval_loss: step 0 {first:.3f} (ln 256 = {math.log(256):.3f}), step 300 {last:.3f}")
assert abs(first - math.log(256)) < 0.3, first
assert last < 2.5, last
PY

# The bf16 run with fp32 activations (the default where the CPU has no bf16 instructions; the
# bf16-activation run below is the other).
for mode in bf16 fp16; do
  flags=(--$mode)
  [[ $mode == bf16 ]] && flags+=(--activation_dtype fp32)
  if run "$WORK/$mode" --max_steps 60 "${flags[@]}" 2>"$WORK/$mode.log"; then
    pass "$mode run exits 0"
  else
    fail "$mode run: $(tail -3 "$WORK/$mode.log")"
  fi
  /usr/bin/python3 - "$WORK/$mode/metrics.jsonl" "$mode" <<'PY' && pass "$mode trains" || fail "$mode metrics"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[0]["dtype"] == sys.argv[2]
msb = lines[0]["model_state_bytes"]
assert msb["params"] * 2 == msb["master"] or abs(msb["params"] * 2 - msb["master"]) < 64, msb
evals = [l["eval_loss"] for l in lines if l["event"] == "eval"]
print(f"{sys.argv[2]} eval_loss {evals[0]:.3f} -> {evals[-1]:.3f}")
assert evals[-1] < evals[0] - 1.5, evals
if sys.argv[2] == "fp16":
    steps = [l for l in lines if l["event"] == "step"]
    assert steps[0]["loss_scale"] == 65536.0, steps[0]["loss_scale"]
PY
done

# A bf16 model (bf16 activations: a bf16 run's default on a CPU with AVX512-BF16 or AMX) trains
# as the bf16 run with fp32 activations does, to within bf16's noise.
if run "$WORK/bf16act" --max_steps 60 --bf16 --activation_dtype bf16 2>"$WORK/bf16act.log"; then
  pass "bf16-activation run exits 0"
else
  fail "bf16-activation run: $(tail -3 "$WORK/bf16act.log")"
fi
grep -q "activations in bf16, matmuls in bf16" "$WORK/bf16act.log" && pass "the log names bf16 activations" ||
  fail "no 'activations in bf16' in the log: $(grep training: "$WORK/bf16act.log")"
/usr/bin/python3 - "$WORK/bf16act/metrics.jsonl" "$WORK/bf16/metrics.jsonl" <<'PY' && pass "bf16 activations train" || fail "bf16-activation metrics"
import json, sys
act = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
assert act[0]["activation_dtype"] == "bf16" and ref[0]["activation_dtype"] == "fp32", (act[0], ref[0])
assert act[0]["activation_bytes"] < ref[0]["activation_bytes"] * 0.8, (act[0]["activation_bytes"], ref[0]["activation_bytes"])
ea = [l["eval_loss"] for l in act if l["event"] == "eval"]
er = [l["eval_loss"] for l in ref if l["event"] == "eval"]
print(f"bf16 activations: eval_loss {ea[0]:.3f} -> {ea[-1]:.3f} (fp32 activations {er[0]:.3f} -> {er[-1]:.3f})")
assert ea[-1] < ea[0] - 1.5, ea
assert abs(ea[-1] - er[-1]) < 0.1, (ea, er)
PY

# --activation_dtype auto (the default): bf16 in a bf16 run where the CPU has bf16 GEMM
# instructions (avx512_bf16, the AVX-512 kernels on), fp32 elsewhere.
want=fp32
grep -qw avx512_bf16 /proc/cpuinfo && [[ ${ZT_CPU_ISA:-} != avx2 ]] && want=bf16
run "$WORK/auto" --max_steps 1 --bf16 2>"$WORK/auto.log"
got=$(/usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["activation_dtype"])' \
  "$WORK/auto/metrics.jsonl" 2>&1)
[[ $got == "$want" ]] && pass "auto activations are $want on this CPU" || fail "auto activations: $got, not $want"

# Gradient checkpointing trains the same model to the same losses.
run "$WORK/ckpt_on" --max_steps 5 --gradient_checkpointing 2>/dev/null
run "$WORK/ckpt_off" --max_steps 5 2>/dev/null
/usr/bin/python3 - "$WORK/ckpt_on/metrics.jsonl" "$WORK/ckpt_off/metrics.jsonl" <<'PY' && pass "checkpointing gives identical losses" || fail "checkpointing losses differ"
import json, sys
def losses(p): return [l["loss"] for l in map(json.loads, open(p)) if l["event"] == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 5 and a == b, (a, b)
PY

# A chunked classifier (--classifier_chunk_tokens: the lm_head and the loss over 100 tokens at a
# time, each chunk's backward in the forward) trains to the losses of the whole batch at once
# (the head's gradient sums its rows in chunks: equal to rounding), holding less.
run "$WORK/chunk_on" --max_steps 5 --classifier_chunk_tokens 100 2>/dev/null
/usr/bin/python3 - "$WORK/chunk_on/metrics.jsonl" "$WORK/ckpt_off/metrics.jsonl" <<'PY' && pass "a chunked classifier trains to the same losses" || fail "chunked classifier losses differ"
import json, sys
def read(p): return [json.loads(l) for l in open(p)]
a, b = read(sys.argv[1]), read(sys.argv[2])
la = [l["loss"] for l in a if l["event"] == "step"]
lb = [l["loss"] for l in b if l["event"] == "step"]
assert len(la) == 5 and all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(la, lb)), (la, lb)
assert a[0]["activation_bytes"] < b[0]["activation_bytes"], (a[0]["activation_bytes"], b[0]["activation_bytes"])
PY

# The self-profile (--profile_steps): 3 steps, the first a warm-up, the other 2 profiled; one table
# on stderr (every class, its ms and % adding up to the step) and one `profile` line.
if run "$WORK/profile" --max_steps 3 --profile_steps 2 2>"$WORK/profile.log"; then
  pass "--profile_steps run exits 0"
else
  fail "--profile_steps run: $(tail -3 "$WORK/profile.log")"
fi
/usr/bin/python3 - "$WORK/profile.log" "$WORK/profile/metrics.jsonl" <<'PY' && pass "profile table and metrics line" || fail "profile: $(grep -A12 'profile:' "$WORK/profile.log")"
import json, re, sys
log = open(sys.argv[1]).read()
assert "profile: steps 2-3 (2 step(s)" in log, log[-3000:]
percent = 0.0
for row in ("gemm", "attention", "norm", "classifier", "elementwise", "optimizer", "communication", "host gaps"):
    m = re.search(r"^zerotrain:\s+" + re.escape(row) + r"\s+(\d+|-)\s+(-?[0-9.]+)\s+(-?[0-9.]+)\s+(-?[0-9.]+)$", log, re.M)
    assert m, f"no table row {row!r}"
    percent += float(m.group(3))
assert re.search(r"^zerotrain:\s+step \(wall\)\s+-\s+[0-9.]+\s+100\.0\s+[0-9.]+$", log, re.M), "no step row"
assert abs(percent - 100) < 0.5, percent
profiles = [l for l in map(json.loads, open(sys.argv[2])) if l["event"] == "profile"]
assert len(profiles) == 1, profiles
p = profiles[0]
assert (p["first_step"], p["last_step"], p["steps"]) == (2, 3, 2), p
for c in ("gemm", "attention", "norm", "classifier", "elementwise", "optimizer"):
    assert p["classes"][c]["calls"] > 0 and p["classes"][c]["ms"] >= 0, (c, p["classes"][c])
assert set(p["classes"]) == {"gemm", "attention", "norm", "classifier", "elementwise", "optimizer", "communication",
                             "host_gaps"}, p["classes"]
print(" ".join(f"{c} {v['percent']:.0f}%" for c, v in p["classes"].items()))
PY
expect_usage_error "--profile_steps -1: one line, exit 2" "^zerotrain: error: --profile_steps must be >= 0" \
  run "$WORK/profile_negative" --max_steps 3 --profile_steps -1
finish
