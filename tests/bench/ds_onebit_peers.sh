#!/usr/bin/env bash
# OneBitAdam, ZeroOneAdam and OneBitLamb against DeepSpeed 0.19.6's own OnebitAdam, ZeroOneAdam and
# OnebitLamb (issue 31),
# run on this CPU: DeepSpeed's code unchanged, its compressed all-reduce (NcclBackend) over gloo
# with numpy standing in for cupy (tests/bench/cupy_shim: packbits, unpackbits, split) and its
# engine's fp32 stage-0 steps written out around it (tests/bench/ds_onebit_peer.py: gradient
# averaging while enable_backward_allreduce is on, clip_grad_norm_, the optimizer's step).
# DeepSpeed 0.19.8 no longer has the 1-bit optimizers (its PR 8490 removed them), so 0.19.6 is
# installed beside it.
#
# The same HF GPT-2, batch and data order as tests/integration/optimizers.sh's runs: OneBitAdam 10
# steps, freeze_step 4, at 1 and 2 ranks; ZeroOneAdam 12 steps with the test's schedule (every kind
# of its steps) at 2 ranks (at one, DeepSpeed adds nothing to the momentum between variance steps,
# where zerotrain adds the gradient), lr 1e-4; OneBitLamb 12 steps, freeze_step 6, at 1 and 2
# ranks, lr 1e-2 (optimizers.sh's: Lamb steps by lr x its trust ratio, a few hundredths here), DeepSpeed
# given the exp_avg_mask of the position embeddings past the block (zerotrain's automatic mask,
# where exp_avg_sq is 0, is exactly those rows here) in groups that keep the parameters' order
# (OnebitLamb all-reduces every momentum as one flat buffer); weight decay 0.1 and clipping 1.0
# for all. Each: zerotrain (mpirun, stage 0), DeepSpeed on 2 threads a rank and on 1, 3 and 4 (its
# own spread: two reduction orders part by whole signs once anything goes through 1 bit), and the
# fp32 transcription the CI test compares against (optimizer_peers.onebit_fine_tune, zero_one_fine_tune, onebit_lamb_fine_tune).
# And DeepSpeed's own semantics, where zerotrain's differ: OnebitLamb as a user runs it (no mask),
# at 2 ranks on a GPT-2 of 43596 parameters (n_embd 36, 63 positions: the flat buffer padded by
# 4), on 2 threads, against onebit_lamb_fine_tune with mask=False and stale_tail=True (DeepSpeed's
# padding keeps the last all-reduce's result from step to step; zerotrain's is zeros); beside it,
# for scale, the transcription with zerotrain's zero padding, and with its mask as well.
#
# The checks (exit 1 when one fails), against DeepSpeed on 2 threads:
#  - the losses of steps 1-5 (before any compressed step moved a weight) within 1e-5;
#  - every loss within 5x DeepSpeed's own spread (the largest of 1, 3 and 4 threads; 1e-5 at least),
#    for zerotrain and for the transcription;
#  - the final weights' median, 99th and 99.9th percentile difference each within 5x DeepSpeed's
#    own (1e-5 at least), and at one rank the largest (past one, the largest is one element whose
#    sign flipped over the smallest variance, which DeepSpeed's reruns flip too: reported, not
#    checked), leaving out the attention's key bias (rounding noise over a variance
#    frozen near 0) and the position embeddings past the block (never used: DeepSpeed's OnebitAdam
#    moves them by its signs' noise over eps, zerotrain masks their momentum; ZeroOneAdam's run
#    gives DeepSpeed an exp_avg_mask for them);
#  - DeepSpeed's own semantics (the padded, unmasked OnebitLamb): the transcription's weights
#    equal DeepSpeed's bit for bit, its losses within 1e-6 (DeepSpeed's mean is a float32 sum).
# The table also gives each run's largest weight difference over every weight (max, all): 0 where
# bit for bit.
#
# Needs the bench venv (ds_optimizer_peers.sh's header) and DeepSpeed 0.19.6 in build/ds0196:
#   DS_BUILD_OPS=0 build/bench-venv/bin/pip install --no-deps --target build/ds0196 deepspeed==0.19.6
# Settings: ZT_BENCH_PYTHON (default build/bench-venv/bin/python), BUILD (default build/release),
# DS_0196 (default build/ds0196), ONEBIT_CASES (default "OneBitAdam ZeroOneAdam OneBitLamb": the
# optimizers to run), ONEBIT_PEERS_ONLY=1 (DeepSpeed against the transcription only: no zerotrain
# runs, none of its checks; for a build without the optimizer, or to check a transcription).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${ZT_BENCH_PYTHON:-build/bench-venv/bin/python}
build=${BUILD:-build/release}
ds=${DS_0196:-build/ds0196}
cases=${ONEBIT_CASES:-OneBitAdam ZeroOneAdam OneBitLamb}
peers_only=${ONEBIT_PEERS_ONLY:-0}
[[ -x $py ]] || { echo "ds_onebit_peers: no $py (see this script's header for the venv)" >&2; exit 2; }
[[ -d $ds/deepspeed/runtime/fp16/onebit ]] || { echo "ds_onebit_peers: no DeepSpeed 0.19.6 in $ds (see the header)" >&2; exit 2; }
export ZT_BIN_DIR=$build ZT_SOURCE_DIR=$PWD
source tests/integration/lib.sh  # one_batch_shard, $WORK (removed at exit)
work=$WORK
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=32 BATCH=8 STEPS=10 LR=1e-4 WD=0.1 FREEZE=4
# OneBitLamb: optimizers.sh's run (12 steps, freeze_step 6, lr 1e-2).
LAMB_STEPS=12 LAMB_FREEZE=6 LAMB_LR=1e-2
# ZeroOneAdam: every kind of its steps in 12 (tests/integration/optimizers.sh's schedule).
ZO_STEPS=12 ZO_KEYS="var_freeze_step=6 var_update_scaler=2 local_step_scaler=1 local_step_clipper=2"
ZO_JSON=', "var_freeze_step": 6, "var_update_scaler": 2, "local_step_scaler": 1, "local_step_clipper": 2'
lscpu | grep -m1 "Model name" || true

one_batch_shard "$work/batch.bin" $T $BATCH
"$py" - "$work/hf" <<'PY'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=256)).save_pretrained(
    sys.argv[1], safe_serialization=True)
# DeepSpeed's own semantics: 43596 parameters, not a multiple of 16, so the flat buffer is padded.
GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=36, n_head=4, n_positions=63, vocab_size=256)).save_pretrained(
    sys.argv[1] + "_padded", safe_serialization=True)
PY
port=29600
# run_case OPTIMIZER NP STEPS LR 'JSON_PARAMS' KEY=NUMBER...: zerotrain (unless ONEBIT_PEERS_ONLY),
# then DeepSpeed on each of $threads_list (2, 1, 3 and 4 unless set) with the model $hf_dir ($work/hf
# unless set), named OPTIMIZER_npNP$suffix.
run_case() {
  local opt=$1 np=$2 steps=$3 lr=$4 params=$5 name=$1_np$2${suffix:-} hf=${hf_dir:-$work/hf}
  shift 5
  if [[ $peers_only != 1 ]]; then
  cat >"$work/$name.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
 "optimizer": {"type": "$opt", "params": {"lr": "auto", "weight_decay": "auto"$params}},
 "zero_optimization": {"stage": 0}}
JSON
  mpirun -np $np --oversubscribe -x OMP_NUM_THREADS=$((2 / np)) "$build/src/zerotrain" --deepspeed "$work/$name.json" \
    --model_name_or_path "$work/hf" --train_data "$work/batch.bin" --block_size $T \
    --per_device_train_batch_size $((BATCH / np)) --weight_decay $WD --max_grad_norm 1.0 --lr_scheduler_type constant \
    --learning_rate $lr --max_steps $steps --output_dir "$work/ours_$name" --disable_tqdm >"$work/ours_$name.log" 2>&1 ||
    { echo "zerotrain's $name failed:"; tail -3 "$work/ours_$name.log"; exit 1; }
  "$build/tools/zero_to_fp32" "$work/ours_$name" "$work/ours_$name.export" >>"$work/ours_$name.log" 2>&1
  fi
  for threads in ${threads_list:-2 1 3 4}; do
    port=$((port + 1))
    pids=()
    for ((r = 0; r < np; ++r)); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r DS_ACCELERATOR=cpu \
        PYTHONPATH=tests/bench/cupy_shim:$ds timeout 600 "$py" tests/bench/ds_onebit_peer.py "$hf" \
        "$work/batch.bin" $T $BATCH $steps $lr $WD $threads "$work/ds_${name}_t$threads" $opt "$@" \
        >"$work/ds_${name}_t${threads}_r$r.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || { echo "DeepSpeed's run failed:"; tail -5 "$work/ds_${name}_t${threads}_r0.log"; exit 1; }
    done
  done
}
wanted() { [[ " $cases " == *" $1 "* ]]; }
if wanted OneBitAdam; then
  for np in 1 2; do
    run_case OneBitAdam $np $STEPS $LR ", \"freeze_step\": $FREEZE" freeze_step=$FREEZE
  done
fi
# ZeroOneAdam at two ranks only: at one, DeepSpeed skips the momentum of the steps between
# variance updates (it compresses nothing there and adds nothing), where zerotrain adds the gradient.
if wanted ZeroOneAdam; then
  run_case ZeroOneAdam 2 $ZO_STEPS $LR "$ZO_JSON" $ZO_KEYS
fi
if wanted OneBitLamb; then
  for np in 1 2; do
    run_case OneBitLamb $np $LAMB_STEPS $LAMB_LR ", \"freeze_step\": $LAMB_FREEZE" freeze_step=$LAMB_FREEZE mask=1
  done
  # DeepSpeed's own semantics: no mask, the flat buffer padded; DeepSpeed on 2 threads, no zerotrain.
  peers_only=1 suffix=_padded hf_dir=$work/hf_padded threads_list=2 \
    run_case OneBitLamb 2 $LAMB_STEPS $LAMB_LR "" freeze_step=$LAMB_FREEZE mask=0
fi

PYTHONPATH=tests/integration:$ds "$py" - "$work" $T $BATCH $STEPS $LR $WD $FREEZE $ZO_STEPS $LAMB_STEPS $LAMB_FREEZE \
  $LAMB_LR "$cases" $peers_only $ZO_KEYS <<'PY'
import json, os, sys, torch
import deepspeed
from optimizer_peers import (batch_windows, onebit_fine_tune, onebit_lamb_fine_tune, onebit_weight_difference,
                             zero_one_fine_tune)
from transformers import GPT2LMHeadModel
work, T, B, steps, lr, wd, freeze, zo_steps = sys.argv[1], *map(int, sys.argv[2:5]), *map(float, sys.argv[5:7]), \
    int(sys.argv[7]), int(sys.argv[8])
lamb_steps, lamb_freeze, lamb_lr, wanted, peers_only = int(sys.argv[9]), int(sys.argv[10]), float(sys.argv[11]), \
    sys.argv[12].split(), sys.argv[13] == "1"
zo = {k: int(v) for k, v in (a.split("=") for a in sys.argv[14:])}
torch.set_num_threads(2)
print(f"# DeepSpeed {deepspeed.__version__}, torch {torch.__version__}; OneBitAdam {steps} steps, lr {lr}, "
      f"freeze_step {freeze}; ZeroOneAdam {zo_steps} steps, lr {lr}, {zo}; OneBitLamb {lamb_steps} steps, "
      f"lr {lamb_lr}, freeze_step {lamb_freeze}; running {' '.join(wanted)}{' (peers only)' if peers_only else ''}")
windows = batch_windows(os.path.join(work, "batch.bin"), T)
hf = os.path.join(work, "hf")
failed = []

def apart(a, b):
    return onebit_weight_difference(a, b, T)

def largest(a, b):  # over every weight, unused positions and the key bias included: 0 where bit for bit
    return max((a[k] - b[k]).abs().max().item() for k in b)

def rel(a, b):
    return max(abs(x - y) / y for x, y in zip(a, b))

fmt = lambda q: "/".join(f"{x:.1e}" for x in q)
cases = [("OneBitAdam", 1, lambda: onebit_fine_tune(hf, windows, steps, 1, B, lr, wd, freeze)),
         ("OneBitAdam", 2, lambda: onebit_fine_tune(hf, windows, steps, 2, B, lr, wd, freeze)),
         ("ZeroOneAdam", 2, lambda: zero_one_fine_tune(hf, windows, zo_steps, 2, B, lr, wd, zo["var_freeze_step"],
                                                       zo["var_update_scaler"], zo["local_step_scaler"],
                                                       zo["local_step_clipper"])),
         ("OneBitLamb", 1, lambda: onebit_lamb_fine_tune(hf, windows, lamb_steps, 1, B, lamb_lr, wd, lamb_freeze)),
         ("OneBitLamb", 2, lambda: onebit_lamb_fine_tune(hf, windows, lamb_steps, 2, B, lamb_lr, wd, lamb_freeze))]
print(f"{'optimizer':<12} {'ranks':<6} {'run':<33} {'losses: worst rel':>18} {'weights: median/99%/99.9%/max':>36} "
      f"{'max, all':>8}")
for opt, np_, transcribe in cases:
    if opt not in wanted:
        continue
    name = f"{opt}_np{np_}"
    ds = json.load(open(f"{work}/ds_{name}_t2.json"))["losses"], torch.load(f"{work}/ds_{name}_t2.pt")
    others = [(json.load(open(f"{work}/ds_{name}_t{t}.json"))["losses"], torch.load(f"{work}/ds_{name}_t{t}.pt"))
              for t in (1, 3, 4)]
    runs = [("optimizer_peers transcription", transcribe())]
    if not peers_only:
        ours_model = GPT2LMHeadModel.from_pretrained(f"{work}/ours_{name}.export", torch_dtype=torch.float32)
        runs.insert(0, ("zerotrain", ([l["loss"] for l in map(json.loads, open(f"{work}/ours_{name}/metrics.jsonl"))
                                       if l["event"] == "step"], ours_model.state_dict())))
    # DeepSpeed's own spread: the largest of 1, 3 and 4 threads against 2, statistic by statistic (one
    # flipped sign over a small sqrt(v) + eps makes the largest difference, so one other run alone
    # understates it).
    band = max(rel(o[0], ds[0]) for o in others), [max(q) for q in zip(*(apart(o[1], ds[1]) for o in others))]
    print(f"{opt:<12} {np_:<6} {'DeepSpeed, 1|3|4 threads (spread)':<33} {band[0]:>18.1e} {fmt(band[1]):>36}")
    for run, (losses, state) in runs:
        loss_rel, weights = rel(losses, ds[0]), apart(state, ds[1])
        print(f"{opt:<12} {np_:<6} {run:<33} {loss_rel:>18.1e} {fmt(weights):>36} {largest(state, ds[1]):>8.1e}")
        if rel(losses[:5], ds[0][:5]) > 1e-5:
            failed.append(f"{name}: {run}'s losses of steps 1-5 {losses[:5]} vs DeepSpeed's {ds[0][:5]}")
        if loss_rel > max(1e-5, 5 * band[0]):
            failed.append(f"{name}: {run}'s losses {losses} vs DeepSpeed's {ds[0]}")
        # The largest difference is checked at one rank only (optimizer_peers.onebit_agreement says why).
        if any(w > max(1e-5, 5 * b) for w, b in zip(weights[:4 if np_ == 1 else 3], band[1])):
            failed.append(f"{name}: {run}'s weights {fmt(weights)} from DeepSpeed's, whose own spread is {fmt(band[1])}")
    print(f"{opt:<12} {np_:<6} DeepSpeed's losses {[round(x, 5) for x in ds[0]]}")
if "OneBitLamb" in wanted:
    # DeepSpeed's own semantics: unmasked, its padding carried from step to step; bit for bit. Beside
    # it, for scale (not checked), zerotrain's zero padding, and its zero padding and mask.
    name, padded = "OneBitLamb_np2_padded", os.path.join(work, "hf_padded")
    ds = json.load(open(f"{work}/ds_{name}_t2.json"))["losses"], torch.load(f"{work}/ds_{name}_t2.pt")
    for run, semantics in (("DeepSpeed's semantics", dict(mask=False, stale_tail=True)),
                           ("zero padding", dict(mask=False)), ("zero padding, mask", {})):
        losses, state = onebit_lamb_fine_tune(padded, windows, lamb_steps, 2, B, lamb_lr, wd, lamb_freeze, **semantics)
        loss_rel, weights, worst = rel(losses, ds[0]), apart(state, ds[1]), largest(state, ds[1])
        print(f"{'OneBitLamb':<12} {'2':<6} {'padded: ' + run:<33} {loss_rel:>18.1e} {fmt(weights):>36} {worst:>8.1e}")
        if semantics.get("stale_tail") and (worst != 0 or loss_rel > 1e-6):
            failed.append(f"{name}: the transcription with DeepSpeed's semantics is {worst:.1e} from DeepSpeed's "
                          f"weights (losses {loss_rel:.1e}); bit for bit wanted")
    print(f"{'OneBitLamb':<12} {'2':<6} DeepSpeed's losses (padded) {[round(x, 5) for x in ds[0]]}")
for f in failed:
    print("FAILED:", f)
print("OK" if not failed else "FAILED")
sys.exit(1 if failed else 0)
PY
