#!/usr/bin/env bash
# HF transformers (pinned in tests/requirements.txt) loads what zero_to_fp32 exports from a stage
# 3 checkpoint written by 2 ranks, and its loss on the fixed eval windows equals ours.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
install_pylib
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$ZEROTRAIN" \
  --deepspeed "$ZT_SOURCE_DIR/configs/zero3.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --eval_data "$DATA/val_*.bin" --output_dir "$WORK/run" --block_size 64 \
  --per_device_train_batch_size 4 --learning_rate 3e-3 --max_steps 30 --save_steps 30 --do_eval \
  --max_eval_samples 16 --disable_tqdm 2>"$WORK/run.log" || fail "training: $(tail -2 "$WORK/run.log")"
"$ZT_BIN_DIR/tools/zero_to_fp32" "$WORK/run" "$WORK/hf" 2>/dev/null || fail "zero_to_fp32"
PYTHONPATH=$PYLIB /usr/bin/python3 - "$WORK/hf" "$DATA/val_000000.bin" "$WORK/run/metrics.jsonl" <<'PY' &&
import json, struct, sys
import torch
from transformers import GPT2LMHeadModel
model_dir, shard, metrics = sys.argv[1:4]
model = GPT2LMHeadModel.from_pretrained(model_dir).eval()
raw = open(shard, "rb").read()
magic, version, count = struct.unpack("<3i", raw[:12])
assert magic == 20240520 and version == 1
tokens = torch.tensor(struct.unpack(f"<{count}H", raw[1024:1024 + 2 * count]), dtype=torch.long)
T, N = 64, 16
windows = torch.stack([tokens[i * T:i * T + T + 1] for i in range(N)])  # docs/design.md's eval windows
with torch.no_grad():
    logits = model(windows[:, :-1]).logits
    hf = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1)).item()
ours = [l["eval_loss"] for l in map(json.loads, open(metrics)) if l["event"] == "eval"][-1]
print(f"eval loss: zerotrain {ours:.6f}, HF transformers {hf:.6f}")
assert abs(hf - ours) < 1e-4 * ours, (hf, ours)
PY
  pass "HF transformers loads the export; its eval loss equals ours" || fail "HF transformers interop"

# The other way: a GPT-2 saved by HF from the bare GPT2Model (tensor names without
# "transformer.", as the hub's original gpt2 has them) initialises zerotrain.
PYTHONPATH=$PYLIB /usr/bin/python3 -c "
import sys
from transformers import GPT2LMHeadModel
GPT2LMHeadModel.from_pretrained(sys.argv[1]).transformer.save_pretrained(sys.argv[2], safe_serialization=True)
" "$WORK/hf" "$WORK/hf_base" 2>/dev/null || fail "HF save_pretrained"
"$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero0.json" --model_name_or_path "$WORK/hf_base" \
  --eval_data "$DATA/val_*.bin" --output_dir "$WORK/imported" --block_size 64 --do_eval --max_eval_samples 16 \
  --per_device_eval_batch_size 8 2>"$WORK/imported.log"
/usr/bin/python3 - "$WORK/run/metrics.jsonl" "$WORK/imported/metrics.jsonl" <<'PY' &&
import json, sys
def ev(p): return [l["eval_loss"] for l in map(json.loads, open(p)) if l["event"] == "eval"][-1]
a, b = ev(sys.argv[1]), ev(sys.argv[2])
print(f"eval loss: trained {a:.6f}, imported from HF's GPT2Model save {b:.6f}")
assert abs(a - b) < 1e-5 * a, (a, b)
PY
  pass "HF-saved GPT-2 weights initialise zerotrain" || fail "import of HF weights: $(tail -2 "$WORK/imported.log")"
finish
