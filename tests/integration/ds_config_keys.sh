#!/usr/bin/env bash
# DeepSpeed configs run unchanged (issue 12): a config holding every key that changes nothing here
# trains, and each such key is named once on stderr; a refused value is one line and exit 2,
# even among accepted keys; a typo still gets the closest known key.
source "$(dirname "$0")/lib.sh"

DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
MODEL=$ZT_SOURCE_DIR/configs/models/gpt2-demo.json
NEUTRAL=$ZT_SOURCE_DIR/tests/data/ds_config_all_neutral.json
ESTIMATE="$ZT_BIN_DIR/tools/zero_estimate"
train() {
  local ds=$1 out=$2
  shift 2
  "$ZEROTRAIN" --deepspeed "$ds" --config_name "$MODEL" --train_data "$DATA/train_*.bin" --output_dir "$out" \
    --max_steps 3 --per_device_train_batch_size 2 --block_size 32 --disable_tqdm "$@"
}

# notices PROGRAM LOG: the notice lines, "<program>: <file>: <key.path>: <value> accepted; ...".
notices() { grep -E "^$1: $NEUTRAL: [a-z0-9_.]+: .*accepted(; changes nothing here| as a performance hint) \(" "$2"; }

if train "$NEUTRAL" "$WORK/neutral" >/dev/null 2>"$WORK/neutral.log"; then
  pass "all-neutral config trains (exit 0)"
else
  fail "all-neutral config: $(tail -3 "$WORK/neutral.log")"
fi
steps=$(grep -c '"event": *"step"' "$WORK/neutral/metrics.jsonl" 2>/dev/null || echo 0)
[[ $steps -eq 3 ]] && pass "3 steps in metrics.jsonl" || fail "expected 3 step events, got $steps"
notices zerotrain "$WORK/neutral.log" >"$WORK/notices.txt"
count=$(wc -l <"$WORK/notices.txt")
unique=$(sort -u "$WORK/notices.txt" | wc -l)
# test_config pins the exact list; here: all of them reach stderr, each once.
if [[ $count -ge 90 && $count -eq $unique ]]; then
  pass "$count notices on stderr, each once"
else
  fail "notices: $count lines, $unique distinct"
fi
for key in prescale_gradients flops_profiler.enabled zero_allow_untested_optimizer activation_checkpointing \
           zero_optimization.zero_quantized_nontrainable_weights wandb.enabled; do
  if grep -q "json: $key: " "$WORK/notices.txt"; then pass "notice for $key"
  else fail "no notice for $key"; fi
done

# zero_estimate reads the same config through the same loader: same notices.
if "$ESTIMATE" --config_name "$MODEL" --deepspeed "$NEUTRAL" --per_device_train_batch_size 2 --block_size 32 \
    >/dev/null 2>"$WORK/estimate.log"; then
  est=$(notices zero_estimate "$WORK/estimate.log" | sort -u | wc -l)
  [[ $est -eq $count ]] && pass "zero_estimate prints the same $est notices" || fail "zero_estimate: $est notices"
else
  fail "zero_estimate on the all-neutral config: $(tail -2 "$WORK/estimate.log")"
fi

# A refused value among all the accepted ones: one line, exit 2, no notices printed first.
sed 's/"zero_quantized_nontrainable_weights": false/"zero_quantized_nontrainable_weights": true/' "$NEUTRAL" \
  >"$WORK/refused.json"
expect_usage_error "refused value" \
  "^zerotrain: .*refused.json: zero_optimization.zero_quantized_nontrainable_weights: true is not implemented: " \
  train "$WORK/refused.json" "$WORK/o1"
printf '{"wandb": {"enabled": true, "project": "demo"}}' >"$WORK/wandb.json"
expect_usage_error "wandb enabled" "wandb.json: wandb.enabled: true is not implemented: .*use tensorboard or csv_monitor" \
  train "$WORK/wandb.json" "$WORK/o2"
printf '{"flops_profiler": {"enabled": false, "profil_step": 1}}' >"$WORK/typo.json"
expect_usage_error "typo in a disabled block" \
  "typo.json: flops_profiler.profil_step: unknown key; did you mean 'flops_profiler.profile_step'" \
  train "$WORK/typo.json" "$WORK/o3"
printf '{"prescale_gradient": false}' >"$WORK/typo_top.json"
expect_usage_error "typo at the top" \
  "typo_top.json: prescale_gradient: unknown key; did you mean 'prescale_gradients'" \
  train "$WORK/typo_top.json" "$WORK/o4"
created=""
for d in o1 o2 o3 o4; do [[ -e "$WORK/$d" ]] && created+=" $d"; done
if [[ -z $created ]]; then pass "no output_dir created by a refused config"; else fail "output_dir created by a refused config:$created"; fi
# HF's guide's ZeRO-2 example runs unchanged (issue 29): round_robin_gradients: true is a
# performance hint, one notice, and the losses (CPU offload, 2 micro-steps a step) are those of
# the same config without it, bit for bit.
HF2=$ZT_SOURCE_DIR/tests/data/ds_config_hf_zero2.json
grep -v round_robin_gradients "$HF2" | sed 's/"contiguous_gradients": true,/"contiguous_gradients": true/' >"$WORK/hf2_plain.json"
hf2() { train "$1" "$2" --gradient_accumulation_steps 2 >/dev/null 2>"$2.log"; }
if hf2 "$HF2" "$WORK/hf2" && hf2 "$WORK/hf2_plain.json" "$WORK/hf2_plain" &&
   [[ $(grep -c "round_robin_gradients: true accepted as a performance hint (" "$WORK/hf2.log") -eq 1 ]] &&
   [[ $(last_losses "$WORK/hf2/metrics.jsonl" 3) == "$(last_losses "$WORK/hf2_plain/metrics.jsonl" 3)" ]] &&
   [[ -n $(last_losses "$WORK/hf2/metrics.jsonl" 3) ]]; then
  pass "HF's ZeRO-2 example trains as it is: one notice for round_robin_gradients, the same losses without it"
else
  fail "HF's ZeRO-2 example: $(tail -2 "$WORK/hf2.log" "$WORK/hf2_plain.log" 2>/dev/null)"
fi

finish
