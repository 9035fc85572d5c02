#!/usr/bin/env bash
# The convergence picture (issue 31): the demo GPT-2 (configs/models/gpt2-demo.json) on the shipped
# corpus, the same 300 steps, batch, schedule (20 warm-up steps, then linear decay) and data order
# for each optimizer, one rank, fp32. Each optimizer runs at each learning rate of its list and is
# drawn at the one with the lowest final eval loss, so no curve loses to a poor guess. The train
# loss (a 20-step moving average) and the eval loss (every 25 steps, on the held-out 10 %) go to
# docs/optimizer_curves.png with matplotlib (the test environment's, tests/requirements.txt), and
# the table of final eval losses to stdout. Checks (exit 1 otherwise): every run finite, and every
# optimizer's best run's eval loss at least 2 nats below the first step's loss (ln 256 = 5.5): each
# learns, at its own pace.
#
# Settings: ZT_CURVE_STEPS (300), ZT_CURVE_THREADS (nproc), ZT_CURVE_OUT (docs/optimizer_curves.png),
# BUILD (build/release).
set -euo pipefail
cd "$(dirname "$0")/../.."
export ZT_BIN_DIR=${BUILD:-build/release} ZT_SOURCE_DIR=$PWD
source tests/integration/lib.sh  # install_pylib, $WORK
install_pylib
steps=${ZT_CURVE_STEPS:-300}
threads=${ZT_CURVE_THREADS:-$(nproc)}
out=${ZT_CURVE_OUT:-docs/optimizer_curves.png}
# DeepSpeed optimizer.type and the learning rates tried (Lion's ~3-10x below AdamW's, as its paper
# advises; Lamb's, whose steps scale with each weight's norm, above).
# Muon's list is its matrices' (muon_lr); its AdamW part runs at AdamW's best here, 3e-3.
CURVES=("AdamW 1e-3 3e-3 1e-2" "Lion 3e-4 1e-3 3e-3" "Adagrad 1e-3 3e-3 1e-2" "Lamb 1e-2 3e-2 1e-1"
        "Muon 5e-3 1e-2 2e-2")

"$PREPARE" share/data/tinyshakespeare.txt --output_dir "$WORK/data" --val_fraction 0.1 >/dev/null 2>&1
runs=()
for entry in "${CURVES[@]}"; do
  read -r type lrs <<<"$entry"
  for lr in $lrs; do
    name=${type}_$lr
    cat >"$WORK/$name.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
 "optimizer": {"type": "$type", "params": {"lr": "auto", "weight_decay": "auto"$([[ $type == Muon ]] && echo ', "adam_lr": 3e-3')}},
 "zero_optimization": {"stage": 0}}
JSON
    echo "training $name ..." >&2
    OMP_NUM_THREADS=$threads "$ZEROTRAIN" --deepspeed "$WORK/$name.json" --config_name configs/models/gpt2-demo.json \
      --train_data "$WORK/data/train_*.bin" --eval_data "$WORK/data/val_*.bin" --output_dir "$WORK/$name" \
      --block_size 128 --per_device_train_batch_size 16 --learning_rate "$lr" --warmup_steps 20 --weight_decay 0.1 \
      --max_steps "$steps" --do_eval --eval_steps 25 --max_eval_samples 64 --save_strategy no --disable_tqdm \
      >"$WORK/$name.log" 2>&1 || { echo "FAILED: $name: $(tail -2 "$WORK/$name.log")"; exit 1; }
    runs+=("$type $lr")
  done
done

PYTHONPATH=$PYLIB /usr/bin/python3 - "$WORK" "$out" "$steps" "${runs[@]}" <<'PY'
import json, math, os, subprocess, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
work, out, steps, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), [r.split() for r in sys.argv[4:]]
curves = {}
for kind, lr in runs:
    lines = [json.loads(l) for l in open(os.path.join(work, f"{kind}_{lr}", "metrics.jsonl"))]
    train = [(l["step"], l["loss"]) for l in lines if l["event"] == "step"]
    evals = [(l["step"], l["eval_loss"]) for l in lines if l["event"] == "eval"]
    assert all(math.isfinite(x) for _, x in train + evals), f"{kind} lr {lr}: a non-finite loss"
    if kind not in curves or evals[-1][1] < curves[kind][2][-1][1]:
        curves[kind] = (lr, train, evals)
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
print(f"# {steps} steps, demo GPT-2 (4 layers, 128 wide, bytes), batch 16 x 128, fp32, one rank, {model}")
print(f"{'optimizer':<10} {'best lr':>8} {'final eval loss':>16}")
failed = []
for kind, (lr, train, evals) in curves.items():
    xs, ys = [s for s, _ in train], [x for _, x in train]
    smooth = [sum(ys[max(0, i - 19):i + 1]) / len(ys[max(0, i - 19):i + 1]) for i in range(len(ys))]
    left.plot(xs, smooth, label=f"{kind} (lr {lr})")
    right.plot([s for s, _ in evals], [x for _, x in evals], marker="o", markersize=3, label=f"{kind} (lr {lr})")
    print(f"{kind:<10} {lr:>8} {evals[-1][1]:>16.4f}")
    if evals[-1][1] > train[0][1] - 2.0:
        failed.append(f"{kind}: final eval loss {evals[-1][1]:.3f}, not 2 nats below the start ({train[0][1]:.3f})")
left.set(title="train loss (20-step moving average)", xlabel="step", ylabel="nats")
right.set(title="eval loss (held-out 10 %)", xlabel="step", ylabel="nats")
for ax in (left, right):
    ax.grid(alpha=0.3)
    ax.legend()
fig.suptitle(f"zerotrain optimizers on the demo GPT-2, {steps} steps, each at its best of three learning rates")
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
for f in failed:
    print("FAILED:", f)
sys.exit(1 if failed else 0)
PY
