#!/usr/bin/env bash
# Lion, Adagrad, Lamb, Muon, Adafactor, OneBitAdam, ZeroOneAdam and OneBitLamb (issue 31) against their peers, with AdamW beside them as the control:
# a GPT-2 written by transformers' save_pretrained, fine-tuned for 8 steps on one global batch
# (the whole training set, so every step sees the same 8 windows) in fp32, with weight decay 0.1,
# clipping at 1.0 and a constant learning rate. The peers train the same model on the same batch
# in PyTorch (eval mode: zerotrain has no dropout): torch.optim.AdamW, torch.optim.Adagrad,
# Lion as its paper writes it (Chen et al. 2023, Algorithm 2; torch 1.13 has none; HF's
# lion_32bit is bitsandbytes' Lion, the same update), and for Lamb, which no peer runs on a CPU
# (DeepSpeed's FusedLamb is CUDA only), FusedLamb's formula per tensor in float64. For each:
#  - one rank, stage 0, chosen by HF's --optim name (Lamb, which HF lacks: DeepSpeed's block);
#  - two ranks, ZeRO-2 with the optimizer offloaded to the CPU, chosen by DeepSpeed's
#    optimizer block, saving at step 4; resumed at one rank, ZeRO-3 with the optimizer on NVMe,
#    to step 8 (the moments resharded across world size and stage);
# the 8 losses equal the peer's within 1e-5 relative and the zero_to_fp32 export's weights equal
# the peer's final weights (max |difference| below 1e-4; measured 2e-8 to 3e-6; the trust ratios
# of Lamb's resharded run are summed over ranks, as each rank holds a part of most tensors). For Lion
# and Muon the attention's key bias is left out of the weight check: its exact gradient is 0 and
# Lion (and Muon's AdamW, eps 1e-10) steps by each side's rounding noise (see the comment below).
# Muon's peer is DeepSpeed's MuonWithAuxAdam in float64, and its losses must also differ from the
# same run without Newton-Schulz (DeepSpeed 0.19.6's stage-0 bug).
# Also: fp16 with loss scaling trains with each (finite, falling), a Lion checkpoint resumed
# with --optim adagrad is refused naming the manifest, and the model states the trainer reports
# hold 8 bytes a parameter for Lion and Adagrad against AdamW's 12.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
install_pylib
TO_FP32=$ZT_BIN_DIR/tools/zero_to_fp32
T=32 BATCH=8 STEPS=8 WD=0.1

one_batch_shard "$WORK/batch.bin" $T $BATCH
PYTHONPATH=$PYLIB /usr/bin/python3 - "$WORK/hf" <<'PY' 2>"$WORK/hf.log" || fail "HF save_pretrained: $(tail -3 "$WORK/hf.log")"
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=256)).save_pretrained(
    sys.argv[1], safe_serialization=True)
PY

# HF --optim name, DeepSpeed optimizer.type, learning rate
OPTIMIZERS=("adamw_torch AdamW 1e-3" "lion_32bit Lion 1e-4" "adagrad Adagrad 1e-2" "- Lamb 1e-2")

config() {  # config NAME STAGE TYPE OFFLOAD [PARAMS] -> path; TYPE "" leaves the optimizer to --optim
  local path=$WORK/$1.json opt="" off=""
  [[ -n $3 ]] && opt="\"optimizer\": {\"type\": \"$3\", \"params\": {\"lr\": \"auto\", \"weight_decay\": \"auto\"${5:-}}},"
  [[ $4 == cpu ]] && off=', "offload_optimizer": {"device": "cpu"}'
  [[ $4 == nvme ]] && off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\"}, \"sub_group_size\": 4096"
  mkdir -p "$WORK/nvme"
  cat >"$path" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
 "fp16": {"enabled": "auto"}, $opt
 "zero_optimization": {"stage": $2$off}}
JSON
  echo "$path"
}

train() {  # train NAME NP CONFIG STEPS FLAGS...
  local name=$1 np=$2 cfg=$3 steps=$4
  shift 4
  timeout 120 mpirun -np "$np" --oversubscribe -x OMP_NUM_THREADS=$((2 / np)) "$ZEROTRAIN" --deepspeed "$cfg" \
    --model_name_or_path "$WORK/hf" --train_data "$WORK/batch.bin" --block_size $T \
    --per_device_train_batch_size $((BATCH / np)) --weight_decay $WD --max_grad_norm 1.0 \
    --lr_scheduler_type constant --max_steps "$steps" --output_dir "$WORK/$name" --disable_tqdm "$@" \
    >>"$WORK/$name.log" 2>&1
}

tally() {  # tally RESULTS: prints a comparison's lines and counts its "ok:" and "FAILED:" ones
  echo "$1"
  passed=$((passed + $(grep -c '^ok: ' <<<"$1")))
  failed=$((failed + $(grep -c '^FAILED: ' <<<"$1")))
}

runs=()
for entry in "${OPTIMIZERS[@]}"; do
  read -r optim type lr <<<"$entry"
  # One rank, stage 0, HF's name (Lamb has none: DeepSpeed's block).
  name=${type}_np1_z0
  if [[ $optim == - ]]; then by_name=(); cfg=$(config "$name" 0 "$type" none); else by_name=(--optim "$optim"); cfg=$(config "$name" 0 "" none); fi
  train "$name" 1 "$cfg" $STEPS "${by_name[@]}" --learning_rate "$lr" &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
  runs+=("$name $type $lr")
  # Two ranks, ZeRO-2, offloaded to the CPU, DeepSpeed's block; resumed on one rank, ZeRO-3, NVMe.
  name=${type}_reshard
  train "$name" 2 "$(config "${name}_a" 2 "$type" cpu)" 4 --learning_rate "$lr" --save_steps 4 &&
    train "$name" 1 "$(config "${name}_b" 3 "$type" nvme)" $STEPS --learning_rate "$lr" \
      --resume_from_checkpoint auto &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
  grep -q "resumed from" "$WORK/$name.log" || echo "exit code: no resume" >>"$WORK/$name.log"
  runs+=("$name $type $lr")
done

# Muon (DeepSpeed's block; HF has no name for it): one rank at stage 0, where DeepSpeed's ran SGD
# (its issue #8441); two ranks at ZeRO-1 with CPU offload saving at step 4, resumed on one rank at
# ZeRO-3 on NVMe; one rank at ZeRO-2 resumed on two at stage 0.
# Its matrices at lr 0.02, everything else with AdamW at adam_lr 1e-3.
muon_config() {  # muon_config NAME STAGE OFFLOAD -> path
  config "$1" "$2" Muon "$3" ', "adam_lr": 1e-3'
}
name=Muon_np1_z0
train "$name" 1 "$(muon_config $name 0 none)" $STEPS --learning_rate 0.02 &&
  "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
runs+=("$name Muon 0.02")
muon_reshard() {  # muon_reshard NAME NP_A STAGE_A OFFLOAD_A NP_B STAGE_B OFFLOAD_B: save at 4, resume to 8
  local name=$1
  train "$name" "$2" "$(muon_config "${name}_a" "$3" "$4")" 4 --learning_rate 0.02 --save_steps 4 &&
    train "$name" "$5" "$(muon_config "${name}_b" "$6" "$7")" $STEPS --learning_rate 0.02 \
      --resume_from_checkpoint auto &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
  grep -q "resumed from" "$WORK/$name.log" || echo "exit code: no resume" >>"$WORK/$name.log"
  runs+=("$name Muon 0.02")
}
muon_reshard Muon_reshard 2 1 cpu 1 3 nvme
# ... and one rank at ZeRO-2 resumed on two at stage 0, where every rank holds the whole state.
muon_reshard Muon_reshard0 1 2 none 2 0 none

# Adafactor, transformers' (HF's --optim adafactor as HF's Trainer builds it: lr given, no relative
# step; its peer transformers.optimization.Adafactor): one rank at stage 0; two ranks at ZeRO-2
# with CPU offload saving at step 4, resumed on one rank at ZeRO-3 on NVMe; and with --optim_args'
# relative step, parameter scaling and beta1 (no --learning_rate: the step sets its own) at two
# ranks, ZeRO-3, resumed on two at stage 0. torch's (DeepSpeed's "Adafactor" block, which
# DeepSpeed builds from torch.optim; its peer torch 2.x's formula, optimizer_peers.py) at two
# ranks, ZeRO-1, resumed on one at ZeRO-2 with CPU offload.
reshard() {  # reshard NAME KIND LR CONFIG_A CONFIG_B NP_A NP_B FLAGS...: save at 4, resume to 8
  local name=$1 kind=$2 lr=$3 cfg_a=$4 cfg_b=$5 np_a=$6 np_b=$7
  shift 7
  train "$name" "$np_a" "$cfg_a" 4 --save_steps 4 "$@" &&
    train "$name" "$np_b" "$cfg_b" $STEPS --resume_from_checkpoint auto "$@" &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
  grep -q "resumed from" "$WORK/$name.log" || echo "exit code: no resume" >>"$WORK/$name.log"
  runs+=("$name $kind $lr")
}
name=Adafactor_np1_z0
train "$name" 1 "$(config $name 0 "" none)" $STEPS --optim adafactor --learning_rate 1e-3 &&
  "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
runs+=("$name Adafactor 1e-3")
reshard Adafactor_reshard Adafactor 1e-3 "$(config Adafactor_a 2 "" cpu)" "$(config Adafactor_b 3 "" nvme)" 2 1 \
  --optim adafactor --learning_rate 1e-3
reshard AdafactorRel_reshard AdafactorRel - "$(config AdafactorRel_a 3 "" none)" "$(config AdafactorRel_b 0 "" none)" \
  2 2 --optim adafactor --optim_args "relative_step=True, scale_parameter=True, beta1=0.9"
reshard TorchAdafactor_reshard TorchAdafactor 1e-2 "$(config TorchAdafactor_a 1 Adafactor none)" \
  "$(config TorchAdafactor_b 2 Adafactor cpu)" 2 1 --learning_rate 1e-2

# ---- the peers, and the comparison ----
results=$(PYTHONPATH=$PYLIB:$ZT_SOURCE_DIR/tests/integration /usr/bin/python3 - "$WORK" $T $STEPS $WD "${runs[@]}" <<'PY'
import json, os, sys, torch
from optimizer_peers import Lamb, Lion, Muon, TorchAdafactor, batch_windows, fine_tune, zero_key_bias_grads
from transformers import GPT2LMHeadModel
from transformers.optimization import Adafactor
torch.set_num_threads(2)
work, T, steps, wd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
runs = [r.split() for r in sys.argv[5:]]
windows = batch_windows(os.path.join(work, "batch.bin"), T)

def peer(kind, lr, after_clip=None):
    make = {"AdamW": lambda p: torch.optim.AdamW(p, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd),
            "Lion": lambda p: Lion(p, lr=lr, betas=(0.9, 0.999), weight_decay=wd),
            "Adagrad": lambda p: torch.optim.Adagrad(p, lr=lr, weight_decay=wd, eps=1e-10),
            "Lamb": lambda p: Lamb(p, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd),
            "Muon": lambda p: Muon(p, lr=lr, adam_lr=1e-3, weight_decay=wd),
            "SGD": lambda p: Muon(p, lr=lr, adam_lr=1e-3, weight_decay=wd, orthogonalize=False),
            "Adafactor": lambda p: Adafactor(p, lr=lr, scale_parameter=False, relative_step=False, weight_decay=wd),
            "AdafactorRel": lambda p: Adafactor(p, lr=None, relative_step=True, scale_parameter=True, beta1=0.9,
                                                weight_decay=wd),
            "TorchAdafactor": lambda p: TorchAdafactor(p, lr=lr, weight_decay=wd)}[kind]
    return fine_tune(os.path.join(work, "hf"), windows, steps, make, named=kind in ("Muon", "SGD"), after_clip=after_clip)

def without_key_bias(key, t):
    """The attention's bias without its key part (elements 64 to 128 here, n_embd 64)."""
    return torch.cat([t[:64], t[128:]]) if key.endswith(".attn.c_attn.bias") else t

def noise_band(kind, lr, ref):
    """transformers' Adafactor adds eps1 = 1e-30 to g^2, so a gradient of rounding noise (the key
    bias's, exactly 0 in exact arithmetic) steps by about +-lr an element, and through its tensor's
    RMS clip moves the query and value biases beside it: the peer against itself, on one thread
    instead of two and with the key bias's gradient exactly 0, moves by as much as we differ. The
    band is the worst of those two against the reference (losses relative, weights absolute)."""
    variants = []
    torch.set_num_threads(1)
    variants.append(peer(kind, lr))
    torch.set_num_threads(2)
    variants.append(peer(kind, lr, after_clip=zero_key_bias_grads))
    loss_band = max(abs(a - b) / b for losses, _ in variants for a, b in zip(losses, ref[0]))
    weight_band = max((without_key_bias(k, state[k]) - without_key_bias(k, ref[1][k])).abs().max().item()
                      for _, state in variants for k in ref[1])
    return loss_band, weight_band

peers = {}
for name, kind, lr in runs:
    log = open(os.path.join(work, name + ".log")).read()
    try:
        assert "exit code" not in log, log.strip().splitlines()[-1]
        if kind not in peers:
            peers[kind] = peer(kind, None if lr == "-" else float(lr))
        ref_losses, ref_state = peers[kind]
        ours = [l["loss"] for l in map(json.loads, open(os.path.join(work, name, "metrics.jsonl"))) if l["event"] == "step"]
        assert len(ours) == steps, f"{len(ours)} step lines, wanted {steps}"
        loss_rel = max(abs(a - b) / b for a, b in zip(ours, ref_losses))
        loss_tol, weight_tol, extra = 1e-5, 1e-4, ""
        if kind in ("Adafactor", "AdafactorRel"):  # within 5x the peer's own spread (noise_band)
            loss_band, weight_band = noise_band(kind, None if lr == "-" else float(lr), peers[kind])
            loss_tol, weight_tol = max(loss_tol, 5 * loss_band), max(weight_tol, 5 * weight_band)
            extra = f"; the peer's own spread {loss_band:.1e} in the losses, {weight_band:.1e} in the weights"
            first = max(abs(a - b) / b for a, b in zip(ours[:2], ref_losses[:2]))
            assert first <= 1e-5, f"the first two losses {ours[:2]} vs the peer's {ref_losses[:2]}: before any noise"
        assert loss_rel <= loss_tol, f"losses {ours} vs the peer's {ref_losses} (worst rel {loss_rel:.1e}{extra})"
        assert ref_losses[-1] < 0.98 * ref_losses[0], f"the peer did not learn: {ref_losses}"
        if kind == "Muon":  # Newton-Schulz ran: not the raw-gradient step DeepSpeed's stage 0 took
            sgd = peer("SGD", float(lr))[0]
            apart = abs(ours[-1] - sgd[-1]) / sgd[-1]
            assert apart > 1e-2, f"the last loss {ours[-1]} is within {apart:.1e} of the unorthogonalised step's {sgd[-1]}"
            extra = f"; without Newton-Schulz the last loss would be {sgd[-1]:.4f}"
        exported = GPT2LMHeadModel.from_pretrained(os.path.join(work, name + ".export"), torch_dtype=torch.float32).state_dict()
        worst, where = 0.0, ""
        for key, ref in ref_state.items():  # the weights (fine_tune leaves the causal-mask buffers out)
            mine = exported[key]
            if kind in ("Lion", "Muon", "Adafactor", "AdafactorRel"):
                # The key bias adds the same q.b to every score of a row, which softmax takes out:
                # its exact gradient is 0, and what either side computes is rounding noise whose
                # sign Lion follows by whole steps of lr, as do Muon's AdamW with eps 1e-10 and
                # transformers' Adafactor with eps1 1e-30. Left out for those.
                mine, ref = without_key_bias(key, mine), without_key_bias(key, ref)
            d = (mine - ref).abs().max().item()
            if d > worst:
                worst, where = d, key
        assert worst < weight_tol, f"final weights differ from the peer's by {worst:.2e} ({where}{extra})"
        print(f"ok: {name}: {steps} losses within {loss_rel:.1e} of the peer's {kind} ({ref_losses[0]:.4f} -> {ref_losses[-1]:.4f}), final weights within {worst:.1e}{extra}")
    except Exception as e:
        print(f"FAILED: {name}: {e}")
PY
) || fail "the peer comparison did not run"
tally "$results"

# ---- OneBitAdam (DeepSpeed 0.19.6's block; stage 0 only, as DeepSpeed runs it) ----
# Its peer is DeepSpeed 0.19.6's OnebitAdam and compressed_allreduce over simulated ranks, each
# taking its slice of the batch as zerotrain's sampler deals it (optimizer_peers.onebit_fine_tune;
# tests/bench/ds_onebit_peers.sh runs DeepSpeed's own code beside it). freeze_step 4 at lr 1e-4:
# step 1 sets up, steps 2-4 are Adam without bias correction on the averaged gradient, steps 5-8
# all-reduce the momentum in 1 bit. One rank compresses nothing (its frozen-variance steps alone);
# at two, a sign is +-1 even for a momentum at rounding level, so the runs part by whole signs
# where two reduction orders round differently: the losses and weights are held to 5x the peer's
# own spread between one thread and two (as Adafactor's; the weights' median, 99th and 99.9th
# percentile difference each, and at one rank the largest; past one rank the largest is one
# element whose sign flipped over the smallest variance, which the peer's reruns flip too:
# reported, not checked; optimizer_peers.onebit_agreement), the losses up to step 5 (the last
# not moved by a compressed step) to 1e-5. The weights leave out the key bias (rounding noise over a
# variance frozen near 0) and the position embeddings past the block (never used: their gradient
# is 0, so the compressed steps leave them, zerotrain's masked momentum and DeepSpeed's noise):
# those must move by the decay alone here (< 1e-5) and by more than 1e-2 in the peer.
# Saved at step 4 or 6 (compressing) and resumed at two ranks, the run equals the one that never
# stopped: each rank's compression errors come back from its shard (DeepSpeed resets them, and
# resumed at step 6 this run would end at 5.05 instead of 4.48). Resumed at one rank, it trains on.
onebit_config() {  # onebit_config NAME -> path
  config "$1" 0 OneBitAdam none ', "freeze_step": 4'
}
for np in 1 2; do
  name=OneBitAdam_np$np
  train "$name" $np "$(onebit_config $name)" $STEPS --learning_rate 1e-4 &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
done
resumed() {  # resumed NAME CONFIG SAVE STEPS NP [LR]: 2 ranks to step SAVE, saved there, resumed at NP ranks to STEPS
  local name=$1 cfg=$2 save=$3 steps=$4 np=$5 lr=${6:-1e-4}
  train "$name" 2 "$cfg" "$save" --learning_rate "$lr" --save_steps "$save" &&
    train "$name" "$np" "$cfg" "$steps" --learning_rate "$lr" --resume_from_checkpoint auto ||
    echo "exit code $?" >>"$WORK/$name.log"
  grep -q "resumed from" "$WORK/$name.log" || echo "exit code: no resume" >>"$WORK/$name.log"
}
for save in 4 6; do
  resumed OneBitAdam_resume$save "$(onebit_config OneBitAdam_resume$save)" $save $STEPS 2
done
resumed OneBitAdam_resume6_np1 "$(onebit_config OneBitAdam_resume6_np1)" 6 $STEPS 1  # saved at two ranks, resumed at one
results=$(PYTHONPATH=$PYLIB:$ZT_SOURCE_DIR/tests/integration /usr/bin/python3 - "$WORK" $T $STEPS $WD <<'PY'
import json, os, sys, torch
from optimizer_peers import batch_windows, onebit_agreement, onebit_fine_tune, step_lines
from transformers import GPT2LMHeadModel
work, T, steps, wd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
windows = batch_windows(os.path.join(work, "batch.bin"), T)

def losses_of(name):
    return [l["loss"] for l in step_lines(work, name)]

for ranks in (1, 2):
    name = f"OneBitAdam_np{ranks}"
    try:
        ours = losses_of(name)  # first: a failed run says why here
        exported = GPT2LMHeadModel.from_pretrained(os.path.join(work, name + ".export"), torch_dtype=torch.float32).state_dict()
        # The weights moved by a median 5e-3 in these 8 steps.
        ref, summary = onebit_agreement(ours, exported,
                                        lambda: onebit_fine_tune(os.path.join(work, "hf"), windows, steps, ranks, 8,
                                                                 1e-4, wd, 4), (1,), T, ranks == 1)
        if ranks == 2:
            # The position embeddings past the block never had a gradient, so their exp_avg_sq is
            # 0: ours masks their momentum (only the decay moves them), DeepSpeed's steps them by
            # its signs' noise over eps.
            start = GPT2LMHeadModel.from_pretrained(os.path.join(work, "hf"), torch_dtype=torch.float32).state_dict()
            moved = lambda s: (s["transformer.wpe.weight"][T:] - start["transformer.wpe.weight"][T:]).abs().max().item()
            assert moved(exported) < 1e-5 < 1e-2 < moved(ref[1]), \
                f"unused positions moved by {moved(exported):.1e} (ours) and {moved(ref[1]):.1e} (DeepSpeed's)"
            extra = f"; unused positions moved {moved(exported):.1e} (DeepSpeed's {moved(ref[1]):.1e})"
            # What the steps hand the collectives: the warm-up all-reduces the fp32 gradient, the
            # compressed steps (5-8) no gradient, only 1-bit signs and a few scales.
            lines = step_lines(work, name)
            warm = lines[3]["comm_bytes"]["all_reduce"]
            for l in lines[4:]:
                c = l["comm_bytes"]
                assert c["all_reduce"] == 0 and c["all_to_all"] > 0, f"step {l['step']}: {c}"
                assert 10 * (c["all_to_all"] + c["all_gather"]) < warm, f"step {l['step']}: {c}, warm-up {warm}"
            c = lines[-1]["comm_bytes"]
            extra += f"; bytes a step {warm} (warm-up) -> {c['all_to_all'] + c['all_gather']} (compressed)"
        else:
            extra = ""
        print(f"ok: {name} against DeepSpeed's OnebitAdam at {ranks} rank(s): {summary}{extra}")
    except Exception as e:
        print(f"FAILED: {name}: {e}")
whole = None
try:
    whole = losses_of("OneBitAdam_np2")
    resumed = losses_of("OneBitAdam_resume4")
    assert len(resumed) == steps, f"{len(resumed)} step lines, wanted {steps}"
    assert all(abs(a - b) <= 1e-7 * b for a, b in zip(resumed, whole)), f"resumed {resumed} vs {whole}"
    print(f"ok: OneBitAdam saved at step 4 (the warm-up's last) and resumed: the same {steps} losses as the run "
          "that never stopped")
except Exception as e:
    print(f"FAILED: OneBitAdam_resume4: {e}")
try:  # saved at step 6, compressing: each rank's errors come back from its own shard
    resumed = losses_of("OneBitAdam_resume6")
    assert len(resumed) == steps, f"{len(resumed)} step lines, wanted {steps}"
    assert all(abs(a - b) <= 1e-7 * b for a, b in zip(resumed, whole)), f"resumed {resumed} vs {whole}"
    print(f"ok: OneBitAdam saved at step 6 (compressing) and resumed at 2 ranks, its errors restored: the same "
          f"{steps} losses as the run that never stopped")
except Exception as e:
    print(f"FAILED: OneBitAdam_resume6: {e}")
try:  # ... and at one rank, where the errors mean nothing: resumed all the same, and learning
    resumed = losses_of("OneBitAdam_resume6_np1")
    assert len(resumed) == steps and resumed[:6] == whole[:6], f"resumed {resumed} vs {whole}"
    assert all(x < resumed[0] for x in resumed[6:]), f"resumed {resumed}"
    print(f"ok: OneBitAdam saved at step 6 at 2 ranks and resumed at 1: trains on ({resumed[-1]:.4f})")
except Exception as e:
    print(f"FAILED: OneBitAdam_resume6_np1: {e}")
PY
) || fail "the OneBitAdam comparison did not run"
tally "$results"

# ---- ZeroOneAdam (DeepSpeed 0.19.6's block; stage 0 only) ----
# Its peer is DeepSpeed 0.19.6's ZeroOneAdam over simulated ranks, each with its own weights
# (optimizer_peers.zero_one_fine_tune, its counters kept as zoadam.py keeps them, and the momentum
# mask as an exp_avg_mask), 12 steps at lr 1e-4 with var_freeze_step 6, var_update_scaler 2,
# local_step_scaler 1 and local_step_clipper 2, so that every kind of step runs: 1 sets up; 2, 3,
# 4 and 6 are variance steps (the interval doubles after 3 and after 6); 5 and 7 take the
# gradient 1-bit all-reduced into the momentum; 8-12 are local, the ranks meeting at 8 (interval
# 1), 10 and 12 (interval 2) and stepping apart at 9 and 11. Tolerances as OneBitAdam's (5x the
# peer's own spread, here the larger of one and three threads against two; the losses to step
# 5, before any compressed step moved the weights, to 1e-5). Saved at step 5 (compressing gradients) or 9 (the ranks
# apart: each rank's weights, momentum and accumulator in its own shard) and resumed at two
# ranks, the run equals the one that never stopped; saved at 9 and resumed at one rank, it
# trains on from the checkpoint's weights.
ZO_STEPS=12
zero_one_config() {  # zero_one_config NAME -> path
  config "$1" 0 ZeroOneAdam none \
    ', "var_freeze_step": 6, "var_update_scaler": 2, "local_step_scaler": 1, "local_step_clipper": 2'
}
for np in 1 2; do
  name=ZeroOneAdam_np$np
  train "$name" $np "$(zero_one_config $name)" $ZO_STEPS --learning_rate 1e-4 &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
done
for save in 5 9; do
  resumed ZeroOneAdam_resume$save "$(zero_one_config ZeroOneAdam_resume$save)" $save $ZO_STEPS 2
done
# saved at two ranks between meetings, resumed at one
resumed ZeroOneAdam_resume9_np1 "$(zero_one_config ZeroOneAdam_resume9_np1)" 9 $ZO_STEPS 1
results=$(PYTHONPATH=$PYLIB:$ZT_SOURCE_DIR/tests/integration /usr/bin/python3 - "$WORK" $T $ZO_STEPS $WD <<'PY'
import json, os, sys, torch
from optimizer_peers import batch_windows, onebit_agreement, step_lines, zero_one_fine_tune
from transformers import GPT2LMHeadModel
work, T, steps, wd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
windows = batch_windows(os.path.join(work, "batch.bin"), T)

def losses_of(name):
    return [l["loss"] for l in step_lines(work, name)]

def peer(ranks):
    return zero_one_fine_tune(os.path.join(work, "hf"), windows, steps, ranks, 8, 1e-4, wd, 6, 2, 1, 2)

for ranks in (1, 2):
    name = f"ZeroOneAdam_np{ranks}"
    try:
        ours = losses_of(name)  # first: a failed run says why here
        exported = GPT2LMHeadModel.from_pretrained(os.path.join(work, name + ".export"), torch_dtype=torch.float32).state_dict()
        # The peer's own spread over 1 and 3 threads against 2.
        ref, summary = onebit_agreement(ours, exported, lambda: peer(ranks), (1, 3), T, ranks == 1)
        extra = ""
        if ranks == 2:
            # What crosses: the variance steps all-reduce the fp32 gradient; steps 5 and 7 the
            # gradient's signs; the meetings (8, 10, 12) the motions' signs; 9 and 11 nothing.
            c = {l["step"]: l["comm_bytes"] for l in step_lines(work, name)}
            full = c[4]["all_reduce"]
            assert full > 0 and c[6]["all_reduce"] == full, c
            for s in (5, 7, 8, 10, 12):
                assert c[s]["all_reduce"] == 0 and c[s]["all_to_all"] > 0, f"step {s}: {c[s]}"
                assert 10 * (c[s]["all_to_all"] + c[s]["all_gather"]) < full, f"step {s}: {c[s]}, full {full}"
            for s in (9, 11):
                assert sum(c[s].values()) == 0, f"step {s}: {c[s]}"
            extra = f"; bytes a step {full} (variance) -> {c[8]['all_to_all'] + c[8]['all_gather']} (1-bit) -> 0 (local)"
        print(f"ok: {name} against DeepSpeed's ZeroOneAdam at {ranks} rank(s): {summary}{extra}")
    except Exception as e:
        print(f"FAILED: {name}: {e}")
whole = None
try:
    whole = losses_of("ZeroOneAdam_np2")
except Exception as e:
    print(f"FAILED: ZeroOneAdam_np2's losses: {e}")
for save, what in ((5, "compressing gradients, its errors restored"),
                   (9, "the ranks apart, each one's weights, momentum and accumulator restored")):
    try:
        resumed = losses_of(f"ZeroOneAdam_resume{save}")
        assert len(resumed) == steps, f"{len(resumed)} step lines, wanted {steps}"
        assert all(abs(a - b) <= 1e-7 * b for a, b in zip(resumed, whole)), f"resumed {resumed} vs {whole}"
        print(f"ok: ZeroOneAdam saved at step {save} ({what}) and resumed at 2 ranks: the same {steps} losses as "
              "the run that never stopped")
    except Exception as e:
        print(f"FAILED: ZeroOneAdam_resume{save}: {e}")
try:
    resumed = losses_of("ZeroOneAdam_resume9_np1")
    assert len(resumed) == steps and resumed[:9] == whole[:9], f"resumed {resumed} vs {whole}"
    assert all(x < resumed[0] for x in resumed[9:]), f"resumed {resumed}"
    print(f"ok: ZeroOneAdam saved at step 9 at 2 ranks and resumed at 1: trains on ({resumed[-1]:.4f})")
except Exception as e:
    print(f"FAILED: ZeroOneAdam_resume9_np1: {e}")
PY
) || fail "the ZeroOneAdam comparison did not run"
tally "$results"

# ---- OneBitLamb (DeepSpeed 0.19.6's block; stage 0 only) ----
# Its peer is DeepSpeed 0.19.6's OnebitLamb over simulated ranks (optimizer_peers.onebit_lamb_fine_tune,
# in DeepSpeed's order of operations, with zerotrain's momentum mask where exp_avg_sq is 0;
# tests/bench/ds_onebit_peers.sh runs DeepSpeed's own code beside it), 12 steps at lr 1e-2 (Lamb's
# row: its steps are lr x the trust ratio, a few hundredths here) with freeze_step 6: step 1 sets
# up; 2-6 are Lamb without bias correction on the averaged gradient, each tensor's trust ratio
# averaged into lamb_coeff_freeze, exp_avg_sq copied to exp_avg_sq_fresh at 6; 7-12 scale each
# tensor's momentum, all-reduce them in 1 bit as one flat buffer, unscale them, and step by the
# frozen ratio times the factor that follows exp_avg_sq_fresh. Tolerances as ZeroOneAdam's (5x the
# peer's own spread over one and three threads against two), the losses to step 7 (the last not
# moved by a compressed step) to 1e-5; the weights leave out the key bias and the position
# embeddings past the block, which must move by the decay alone here (< 2e-5; 5e-6 measured) and
# by more than 1e-2 in the peer without the mask (DeepSpeed as a user runs it: its signs' noise over
# eps). Saved at step 6 (the warm-up's last) or 9 (compressing: each rank's errors come back from
# its shard) and resumed at two ranks, the run equals the one that never stopped (DeepSpeed's own
# load would zero lamb_coeff_freeze in the warm-up and the errors always); saved at 9 and resumed
# at one rank, it trains on.
LAMB_STEPS=12
onebit_lamb_config() {  # onebit_lamb_config NAME -> path
  config "$1" 0 OneBitLamb none ', "freeze_step": 6'
}
for np in 1 2; do
  name=OneBitLamb_np$np
  train "$name" $np "$(onebit_lamb_config $name)" $LAMB_STEPS --learning_rate 1e-2 &&
    "$TO_FP32" "$WORK/$name" "$WORK/$name.export" >>"$WORK/$name.log" 2>&1 || echo "exit code $?" >>"$WORK/$name.log"
done
for save in 6 9; do
  resumed OneBitLamb_resume$save "$(onebit_lamb_config OneBitLamb_resume$save)" $save $LAMB_STEPS 2 1e-2
done
# saved at two ranks while compressing, resumed at one
resumed OneBitLamb_resume9_np1 "$(onebit_lamb_config OneBitLamb_resume9_np1)" 9 $LAMB_STEPS 1 1e-2
results=$(PYTHONPATH=$PYLIB:$ZT_SOURCE_DIR/tests/integration /usr/bin/python3 - "$WORK" $T $LAMB_STEPS $WD <<'PY'
import json, os, sys, torch
from optimizer_peers import batch_windows, onebit_agreement, onebit_lamb_fine_tune, step_lines
from transformers import GPT2LMHeadModel
work, T, steps, wd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
windows = batch_windows(os.path.join(work, "batch.bin"), T)

def losses_of(name):
    return [l["loss"] for l in step_lines(work, name)]

def peer(ranks, **semantics):
    return onebit_lamb_fine_tune(os.path.join(work, "hf"), windows, steps, ranks, 8, 1e-2, wd, 6, **semantics)

for ranks in (1, 2):
    name = f"OneBitLamb_np{ranks}"
    try:
        ours = losses_of(name)  # first: a failed run says why here
        exported = GPT2LMHeadModel.from_pretrained(os.path.join(work, name + ".export"), torch_dtype=torch.float32).state_dict()
        # The peer's own spread over 1 and 3 threads against 2; steps 1-7 before any compressed step moved a weight.
        ref, summary = onebit_agreement(ours, exported, lambda: peer(ranks), (1, 3), T, ranks == 1, early=7)
        extra = ""
        if ranks == 2:
            # The position embeddings past the block never had a gradient, so their exp_avg_sq is
            # 0: the mask keeps their momentum 0 (only the decay moves them), where DeepSpeed
            # without an exp_avg_mask steps them by its signs' noise over eps.
            start = GPT2LMHeadModel.from_pretrained(os.path.join(work, "hf"), torch_dtype=torch.float32).state_dict()
            moved = lambda s: (s["transformer.wpe.weight"][T:] - start["transformer.wpe.weight"][T:]).abs().max().item()
            unmasked = moved(peer(2, mask=False)[1])
            assert moved(exported) < 2e-5 < 1e-2 < unmasked, \
                f"unused positions moved by {moved(exported):.1e} (ours) and {unmasked:.1e} (DeepSpeed's, unmasked)"
            extra = f"; unused positions moved {moved(exported):.1e} (DeepSpeed's unmasked {unmasked:.1e})"
            # What crosses: the warm-up (2-6) all-reduces the fp32 gradient; the compressed steps
            # (7-12) no gradient, only the momenta's 1-bit signs and a few scales.
            c = {l["step"]: l["comm_bytes"] for l in step_lines(work, name)}
            gradient = 4 * sum(p.numel() for p in GPT2LMHeadModel.from_pretrained(os.path.join(work, "hf")).parameters())
            assert all(c[s]["all_reduce"] >= gradient for s in range(2, 7)), f"the warm-up's bytes {c}, the gradient's {gradient}"
            warm = c[6]["all_reduce"]
            for s in range(7, steps + 1):
                assert c[s]["all_reduce"] == 0 and c[s]["all_to_all"] > 0, f"step {s}: {c[s]}"
                assert 10 * (c[s]["all_to_all"] + c[s]["all_gather"]) < warm, f"step {s}: {c[s]}, warm-up {warm}"
            extra += f"; bytes a step {warm} (warm-up) -> {c[steps]['all_to_all'] + c[steps]['all_gather']} (compressed)"
        print(f"ok: {name} against DeepSpeed's OnebitLamb at {ranks} rank(s): {summary}{extra}")
    except Exception as e:
        print(f"FAILED: {name}: {e}")
whole = None
try:
    whole = losses_of("OneBitLamb_np2")
except Exception as e:
    print(f"FAILED: OneBitLamb_np2's losses: {e}")
for save, what in ((6, "the warm-up's last, lamb_coeff_freeze restored"),
                   (9, "compressing, each rank's errors and the factors restored")):
    try:
        resumed = losses_of(f"OneBitLamb_resume{save}")
        assert len(resumed) == steps, f"{len(resumed)} step lines, wanted {steps}"
        assert all(abs(a - b) <= 1e-7 * b for a, b in zip(resumed, whole)), f"resumed {resumed} vs {whole}"
        print(f"ok: OneBitLamb saved at step {save} ({what}) and resumed at 2 ranks: the same {steps} losses as "
              "the run that never stopped")
    except Exception as e:
        print(f"FAILED: OneBitLamb_resume{save}: {e}")
try:  # ... and at one rank, where the errors mean nothing: resumed all the same, and learning
    resumed = losses_of("OneBitLamb_resume9_np1")
    assert len(resumed) == steps and resumed[:9] == whole[:9], f"resumed {resumed} vs {whole}"
    assert all(x < resumed[0] for x in resumed[9:]), f"resumed {resumed}"
    print(f"ok: OneBitLamb saved at step 9 at 2 ranks and resumed at 1: trains on ({resumed[-1]:.4f})")
except Exception as e:
    print(f"FAILED: OneBitLamb_resume9_np1: {e}")
PY
) || fail "the OneBitLamb comparison did not run"
tally "$results"

# ---- fp16 (loss scaling) trains with each; the reported model states ----
# (OneBitAdam, ZeroOneAdam and OneBitLamb at stage 0, the only one they run at, with freeze_step 4
# and var_freeze_step 4: their compressed and local steps too; and in bf16 besides. OneBitLamb's
# fp16 is dynamic loss scaling, the only scaling it takes.)
for entry in "${OPTIMIZERS[@]}" "- Muon 0.02" "- Adafactor 1e-2" "- OneBitAdam 1e-4" "bf16 OneBitAdam 1e-4" \
  "- ZeroOneAdam 1e-4" "bf16 ZeroOneAdam 1e-4" "- OneBitLamb 1e-2" "bf16 OneBitLamb 1e-2"; do
  read -r optim type lr <<<"$entry"
  stage=2 params="" dtype=fp16
  [[ $type == OneBitAdam || $type == OneBitLamb ]] && stage=0 params=', "freeze_step": 4'
  [[ $type == ZeroOneAdam ]] && stage=0 \
    params=', "var_freeze_step": 4, "var_update_scaler": 2, "local_step_scaler": 1, "local_step_clipper": 2'
  [[ $optim == bf16 ]] && dtype=bf16
  name=${type}_$dtype
  if train "$name" 2 "$(config "$name" $stage "$type" none "$params")" $STEPS --learning_rate "$lr" --$dtype \
    --save_strategy no &&
    /usr/bin/python3 - "$WORK/$name/metrics.jsonl" "$type" <<'PY' >>"$WORK/$name.log" 2>&1
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if l["event"] == "step"]
losses = [l["loss"] for l in steps if l["loss"] is not None]
assert all(math.isfinite(x) for x in losses) and len(losses) >= 6, losses
assert losses[-1] < losses[0], f"no progress: {losses}"
start = next(l for l in lines if l["event"] == "start")
states = start["model_state_bytes"]
moments = states["exp_avg"] + states["exp_avg_sq"]
# ZeRO-2 at 2 ranks: the master and the moments are this rank's half; Adam's and Lamb's moments
# are twice the master weights (OneBitAdam's at stage 0 too, where every rank holds everything),
# Lion's and Adagrad's equal to them. OneBitLamb keeps a third fp32 field, exp_avg_sq_fresh, which
# the engine counts under exp_avg_sq (src/zero/optimizer_partition.cpp): three times the master.
# Muon's exp_avg is as large as the master weights; its exp_avg_sq holds only the tensors its
# AdamW steps (the embeddings, norms and biases), not the hidden matrices.
# Adafactor (torch's, DeepSpeed's block) keeps no exp_avg, and for its matrices only a row and a
# column factor: its exp_avg_sq is a few percent of the master weights.
if sys.argv[2] == "Muon":
    assert abs(states["exp_avg"] - states["master"]) <= 0.01 * states["master"], states
    assert 0 < states["exp_avg_sq"] < 0.9 * states["master"], states
elif sys.argv[2] == "Adafactor":
    assert states["exp_avg"] == 0 and 0 < states["exp_avg_sq"] < 0.1 * states["master"], states
else:
    want = 3 if sys.argv[2] == "OneBitLamb" else 2 if sys.argv[2] in ("AdamW", "Lamb", "OneBitAdam", "ZeroOneAdam") else 1
    assert abs(moments - want * states["master"]) <= 0.01 * states["master"], states
    assert (states["exp_avg"] == 0) == (sys.argv[2] == "Adagrad") and (states["exp_avg_sq"] == 0) == (sys.argv[2] == "Lion"), states
PY
  then
    pass "$name: $dtype trains ($type's model states as counted)"
  else
    fail "$name: $(tail -3 "$WORK/$name.log")"
  fi
done

# ---- a checkpoint holds one optimizer's state: another is refused by name ----
cfg=$(config refuse 1 "" none)
expect_usage_error_filtered '^zerotrain: error' "Lion checkpoint resumed with --optim adagrad" \
  "Lion_reshard/global_step8/manifest.json: optimizer: the checkpoint holds Lion's state and the config asks for Adagrad" \
  mpirun -np 1 "$ZEROTRAIN" --deepspeed "$cfg" --model_name_or_path "$WORK/hf" --train_data "$WORK/batch.bin" \
  --block_size $T --per_device_train_batch_size $BATCH --max_steps 10 --output_dir "$WORK/Lion_reshard" \
  --resume_from_checkpoint auto --optim adagrad --disable_tqdm
# ... and an Adafactor checkpoint without beta1 holds no exp_avg, which a resume with beta1 needs.
expect_usage_error_filtered '^zerotrain: error' "Adafactor checkpoint without beta1 resumed with beta1" \
  "Adafactor_reshard/global_step8/zero_rank_0_optim_states.h5: holds no exp_avg, which the Adafactor resumed keeps" \
  mpirun -np 1 "$ZEROTRAIN" --deepspeed "$cfg" --model_name_or_path "$WORK/hf" --train_data "$WORK/batch.bin" \
  --block_size $T --per_device_train_batch_size $BATCH --max_steps 10 --output_dir "$WORK/Adafactor_reshard" \
  --resume_from_checkpoint auto --optim adafactor --optim_args beta1=0.9 --disable_tqdm
finish
