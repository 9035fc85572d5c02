#!/usr/bin/env bash
# The Llama family against HF transformers (issue 16). Tiny random LlamaForCausalLM (grouped-query
# attention, attention biases, linear rope scaling, untied head), MistralForCausalLM (one kv head,
# untied) and Qwen2ForCausalLM (q/k/v biases, tied, saved sharded with model.safetensors.index.json)
# are built and saved by transformers itself. For each, at ZeRO stages 0 (1 rank), 3 (2 ranks)
# and 2 with CPU offload (2 ranks), in fp32:
#  - our eval loss of the loaded model equals transformers' loss on the same windows (1e-5 rel);
#  - step 1's loss equals that eval loss (the batch is the eval data), and the loss falls over
#    10 steps;
#  - zero_to_fp32 exports the run; transformers loads the export (AutoModelForCausalLM) and its
#    loss equals our final eval loss (1e-5 rel), so every tensor went back under its HF name;
#  - the stage-3 run resumes on 1 rank at stage 1 (resharded) for 2 more finite steps.
# And for each, a bf16 model (--bf16 --activation_dtype bf16, the CPU's bf16 kernels): its eval
# loss against PyTorch's bf16 autocast on the same bf16-rounded weights and windows (issue 33),
# within 2e-3 relative.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
install_pylib
TO_FP32=$ZT_BIN_DIR/tools/zero_to_fp32
T=32 BATCH=8 STEPS=10

/usr/bin/python3 - "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" "$WORK/batch.bin" $T $BATCH <<'PY'
import struct, sys
corpus, out, T, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tokens = list(open(corpus, "rb").read()[: B * T + 1])  # byte-level ids, under every model's vocab
with open(out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY

# The models, saved by transformers. initializer_range 0.1 (not 0.02) so that the random models
# predict far from uniform and every weight moves the loss.
PYTHONPATH=$PYLIB /usr/bin/python3 - "$WORK" <<'PY' 2>"$WORK/hf.log" || fail "HF save_pretrained: $(tail -3 "$WORK/hf.log")"
import sys, torch
from transformers import LlamaConfig, MistralConfig, Qwen2Config, AutoModelForCausalLM
work = sys.argv[1]
common = dict(vocab_size=300, hidden_size=64, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, initializer_range=0.1, rms_norm_eps=1e-6)
configs = {
    "llama": LlamaConfig(num_key_value_heads=2, attention_bias=True, tie_word_embeddings=False,
                         rope_theta=500.0, rope_scaling={"type": "linear", "factor": 2.0}, **common),
    "mistral": MistralConfig(num_key_value_heads=1, tie_word_embeddings=False, sliding_window=64, **common),
    "qwen2": Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common),
}
for name, config in configs.items():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    # Norm weights away from 1 and biases away from 0, so that a misplaced one shows.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    shard = {"max_shard_size": "60KB"} if name == "qwen2" else {}
    model.save_pretrained(f"{work}/{name}", safe_serialization=True, **shard)
PY
[[ -f $WORK/qwen2/model.safetensors.index.json ]] || fail "qwen2 was not saved sharded"

# transformers' loss of a model folder on the batch's windows (docs/design.md's eval windows).
cat >"$WORK/hf_loss.py" <<'PY'
import struct, sys, torch
from transformers import AutoModelForCausalLM
# --autocast: the weights rounded to bf16 and the forward under PyTorch's bf16 autocast.
autocast = sys.argv[1] == "--autocast"
if autocast:
    sys.argv.pop(1)
path, T = sys.argv[1], int(sys.argv[2])
raw = open(path, "rb").read()
count = struct.unpack("<3i", raw[:12])[2]
tokens = torch.tensor(struct.unpack(f"<{count}H", raw[1024:1024 + 2 * count]), dtype=torch.long)
windows = torch.stack([tokens[i * T:i * T + T + 1] for i in range((count - 1) // T)])
for model_dir in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if autocast:
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
        logits = model(windows[:, :-1]).logits.double()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    print(model_dir, repr(loss.item()))
PY
PYTHONPATH=$PYLIB /usr/bin/python3 "$WORK/hf_loss.py" "$WORK/batch.bin" $T "$WORK"/{llama,mistral,qwen2} \
  >"$WORK/reference.txt" 2>"$WORK/reference.log" || fail "transformers' reference losses: $(tail -3 "$WORK/reference.log")"

config() {  # config STAGE OFFLOAD(none|cpu) -> path
  local path=$WORK/ds_$1_$2.json offload=""
  [[ $2 == cpu ]] && offload=', "offload_optimizer": {"device": "cpu"}'
  cat >"$path" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.0}},
 "zero_optimization": {"stage": $1$offload}}
JSON
  echo "$path"
}

runs=()
for arch in llama mistral qwen2; do
  for setting in "1 0 none" "2 3 none" "2 2 cpu"; do
    read -r np stage offload <<<"$setting"
    name=${arch}_np${np}_z${stage}_${offload}
    flags=(--model_name_or_path "$WORK/$arch" --train_data "$WORK/batch.bin" --eval_data "$WORK/batch.bin"
           --block_size $T --per_device_train_batch_size $((BATCH / np)) --learning_rate 3e-3 --disable_tqdm)
    launch=(timeout 120 mpirun -np $np --oversubscribe -x OMP_NUM_THREADS=$((2 / np)) "$ZEROTRAIN")
    { "${launch[@]}" --deepspeed "$(config $stage $offload)" "${flags[@]}" --output_dir "$WORK/$name" \
        --max_steps $STEPS --eval_on_start --do_eval 2>"$WORK/$name.log" >/dev/null &&
        "$TO_FP32" "$WORK/$name" "$WORK/$name.hf" 2>>"$WORK/$name.log"; } || echo "exit code $?" >>"$WORK/$name.log"
    if [[ $stage == 3 ]]; then  # resharded: 2 ranks at stage 3 -> 1 rank at stage 1
      timeout 120 mpirun -np 1 "$ZEROTRAIN" --deepspeed "$(config 1 none)" "${flags[@]}" \
        --per_device_train_batch_size $BATCH --output_dir "$WORK/$name" --max_steps $((STEPS + 2)) \
        --resume_from_checkpoint auto 2>>"$WORK/$name.log" >/dev/null || echo "exit code $?" >>"$WORK/$name.log"
    fi
    runs+=("$name")
  done
done
exported=()
for name in "${runs[@]}"; do [[ -d $WORK/$name.hf ]] && exported+=("$WORK/$name.hf"); done
PYTHONPATH=$PYLIB /usr/bin/python3 "$WORK/hf_loss.py" "$WORK/batch.bin" $T "${exported[@]}" >"$WORK/exported.txt" \
  2>"$WORK/exported.log" || fail "transformers could not load an export: $(tail -3 "$WORK/exported.log")"

# bf16 models: one eval of each family's loaded model in bf16, against PyTorch's bf16 autocast.
PYTHONPATH=$PYLIB /usr/bin/python3 "$WORK/hf_loss.py" --autocast "$WORK/batch.bin" $T "$WORK"/{llama,mistral,qwen2} \
  >"$WORK/autocast.txt" 2>"$WORK/autocast.log" || fail "PyTorch's bf16 autocast losses: $(tail -3 "$WORK/autocast.log")"
cat >"$WORK/ds_bf16.json" <<'JSON'
{"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": true}, "zero_optimization": {"stage": 0}}
JSON
for arch in llama mistral qwen2; do
  eval_loss=$(timeout 120 "$ZEROTRAIN" --deepspeed "$WORK/ds_bf16.json" --model_name_or_path "$WORK/$arch" --bf16 \
    --activation_dtype bf16 --train_data "$WORK/batch.bin" --eval_data "$WORK/batch.bin" --block_size $T \
    --per_device_train_batch_size $BATCH --max_steps 1 --eval_on_start --disable_tqdm \
    --output_dir "$WORK/${arch}_bf16" 2>"$WORK/${arch}_bf16.log" >/dev/null &&
    /usr/bin/python3 -c 'import json, sys; print([l["eval_loss"] for l in map(json.loads, open(sys.argv[1]))
                          if l["event"] == "eval"][0])' "$WORK/${arch}_bf16/metrics.jsonl")
  want=$(awk -v dir="$WORK/$arch" '$1 == dir {print $2}' "$WORK/autocast.txt")
  if [[ -n $eval_loss && -n $want ]] &&
     /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 2e-3 * abs(b))' \
       "$eval_loss" "$want"; then
    pass "$arch bf16 model: eval loss $eval_loss ~ PyTorch bf16 autocast $want"
  else
    fail "$arch bf16 model: eval loss '$eval_loss' vs PyTorch bf16 autocast '$want':" \
      "$(tail -2 "$WORK/${arch}_bf16.log")"
  fi
done

results=$(/usr/bin/python3 - "$WORK" $STEPS "${runs[@]}" <<'PY'
import json, math, os, sys
work, steps, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
losses = {}
for f in ("reference.txt", "exported.txt"):
    for line in open(os.path.join(work, f)):
        path, value = line.split()
        losses[os.path.basename(path)] = float(value)
worst = 0.0
for name in runs:
    log = open(os.path.join(work, name + ".log")).read()
    try:
        assert "exit code" not in log, log.strip().splitlines()[-1]
        lines = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
        train = [l for l in lines if l["event"] == "step"]
        evals = {l["step"]: l["eval_loss"] for l in lines if l["event"] == "eval"}
        ref, exported = losses[name.split("_")[0]], losses[name + ".hf"]
        checks = {"eval at step 0 vs transformers": (evals[0], ref),
                  "step 1 vs eval at step 0": (train[0]["loss"], evals[0]),
                  "transformers on the export vs our eval at the end": (exported, evals[steps])}
        for what, (a, b) in checks.items():
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            assert rel <= 1e-5, f"{what}: {a} vs {b} (rel {rel:.2e})"
        assert all(math.isfinite(l["loss"]) for l in train), "a non-finite loss"
        assert train[steps - 1]["loss"] < 0.9 * train[0]["loss"], f"the loss did not fall: {train[0]['loss']} -> {train[steps - 1]['loss']}"
        if "_z3_" in name:
            assert [l["step"] for l in train] == list(range(1, steps + 3)), [l["step"] for l in train]
            assert "resumed from" in log, "no resume"
        print(f"ok: {name}: transformers {ref:.6f} = eval {evals[0]:.6f} = step 1 {train[0]['loss']:.6f} -> "
              f"step {steps} eval {evals[steps]:.6f} = transformers on the export {exported:.6f}")
    except Exception as e:
        print(f"FAILED: {name}: {type(e).__name__}: {e}")
print(f"largest relative difference: {worst:.1e}")
PY
)
echo "$results"
passed=$((passed + $(grep -c '^ok: ' <<<"$results")))
failed=$((failed + $(grep -c '^FAILED: ' <<<"$results")))
[[ $(grep -c '^ok: \|^FAILED: ' <<<"$results") -eq ${#runs[@]} ]] || fail "the checker did not report every run"
finish
