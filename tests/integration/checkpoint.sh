#!/usr/bin/env bash
# Checkpoints end to end: bit-exact resume at 1 and 2 ranks for every stage; resharding 2->1,
# 1->2 and 2->4 across stages; a kill -9 at many points of a save leaves `latest` loadable; a
# corrupt, missing, truncated or mismatched checkpoint is one clear error, exit 2, nothing touched.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
# A schedule that does not depend on --max_steps, so a run cut short and resumed trains exactly
# like one that was not.
for s in 0 1 2 3; do
  sed 's/"WarmupDecayLR"/"WarmupLR"/; /total_num_steps/d; s/"warmup_type": "linear",/"warmup_type": "linear"/' \
    "$ZT_SOURCE_DIR/configs/zero$s.json" >"$WORK/z$s.json"
done

# zt NP STAGE OUT ARGS...: a global batch of 4 sequences of 32 tokens.
zt() {
  local np=$1 stage=$2 out=$3
  shift 3
  local forward=(-x OMP_NUM_THREADS)
  [[ -n "${ZT_CHECKPOINT_CRASH_AT:-}" ]] && forward+=(-x ZT_CHECKPOINT_CRASH_AT)
  OMP_NUM_THREADS=1 timeout 300 mpirun -np "$np" --oversubscribe "${forward[@]}" "$ZEROTRAIN" \
    --deepspeed "$WORK/z$stage.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --output_dir "$out" --block_size 32 --per_device_train_batch_size $((4 / np)) \
    --learning_rate 2e-3 --warmup_steps 2 --seed 5 --disable_tqdm "$@"
}
# last_losses METRICS N: the losses of the last N step lines.
last_losses() {
  /usr/bin/python3 -c "import json,sys; print(' '.join(repr(l['loss']) for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step'))" "$1" |
    tr ' ' '\n' | tail -n "$2" | tr '\n' ' '
}
close_enough() {  # close_enough "A..." "B...": equal within 1e-6 relative
  /usr/bin/python3 -c "
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
assert len(a) == len(b) > 0, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f'max relative difference {worst:.2e}')
assert worst <= 1e-6, worst" "$1" "$2"
}

# ---- bit-exact resume, every stage, 1 and 2 ranks ----
for np in 1 2; do
  for stage in 0 1 2 3; do
    tag=np${np}_s$stage
    zt "$np" "$stage" "$WORK/full_$tag" --max_steps 8 2>/dev/null
    zt "$np" "$stage" "$WORK/cut_$tag" --max_steps 4 --save_steps 4 2>/dev/null
    zt "$np" "$stage" "$WORK/cut_$tag" --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/$tag.log"
    want=$(last_losses "$WORK/full_$tag/metrics.jsonl" 4)
    got=$(last_losses "$WORK/cut_$tag/metrics.jsonl" 4)
    if [[ -n "$want" && "$want" == "$got" ]]; then pass "resume $tag bit-exact"; else fail "resume $tag: [$want] vs [$got] $(tail -2 "$WORK/$tag.log")"; fi
  done
done

# ---- resharding on load: saved at N ranks and stage S, loaded at M ranks and stage S' ----
zt 2 2 "$WORK/save2" --max_steps 4 --save_steps 4 2>/dev/null
zt 1 0 "$WORK/save1" --max_steps 4 --save_steps 4 2>/dev/null
reshard() {  # reshard NAME SOURCE NP STAGE REFERENCE
  local out=$WORK/reshard_$1
  if zt "$3" "$4" "$out" --max_steps 8 --resume_from_checkpoint "$2" 2>"$out.log" &&
     close_enough "$(last_losses "$5" 4)" "$(last_losses "$out/metrics.jsonl" 4)"; then
    pass "reshard $1"
  else
    fail "reshard $1: $(tail -2 "$out.log")"
  fi
}
reshard "2x2->1x3" "$WORK/save2" 1 3 "$WORK/full_np2_s2/metrics.jsonl"
reshard "1x0->2x1" "$WORK/save1" 2 1 "$WORK/full_np1_s0/metrics.jsonl"
reshard "2x2->4x3" "$WORK/save2" 4 3 "$WORK/full_np2_s2/metrics.jsonl"
reshard "2x2->4x0" "$WORK/save2/global_step4" 4 0 "$WORK/full_np2_s2/metrics.jsonl"

# ---- kill -9 in the middle of a save: `latest` always names a loadable checkpoint ----
reference=$(last_losses "$WORK/full_np2_s1/metrics.jsonl" 1)
for k in 1 3 5 7 9 11 12 13 15 17 19 21 23; do
  out=$WORK/crash_$k
  ZT_CHECKPOINT_CRASH_AT=$k zt 2 1 "$out" --max_steps 8 --save_steps 3 >/dev/null 2>&1
  if [[ ! -f "$out/latest" ]]; then
    # The crash came before the first checkpoint was published: nothing to resume, and no
    # half-written checkpoint may pass for one.
    if zt 2 1 "$out" --max_steps 8 --resume_from_checkpoint auto >/dev/null 2>"$out.log"; then
      fail "crash point $k: resumed without a published checkpoint"
    else
      pass "crash point $k: no checkpoint published yet, resume refuses"
    fi
    continue
  fi
  if zt 2 1 "$out" --max_steps 8 --resume_from_checkpoint auto >/dev/null 2>"$out.log" &&
     [[ "$(last_losses "$out/metrics.jsonl" 1)" == "$reference" ]]; then
    pass "crash point $k: latest ($(cat "$out/latest")) loads and training ends bit-exact"
  else
    fail "crash point $k: $(tail -2 "$out.log")"
  fi
done

# ---- bad checkpoints: one clear line naming the file, exit 2, the output untouched ----
bad() {  # bad NAME PATTERN MUTATION: copy save2, mutate it, try to resume from it
  local name=$1 pattern=$2 mutation=$3
  local ck=$WORK/bad_$name
  rm -rf "$ck" && cp -r "$WORK/save2" "$ck"
  (cd "$ck/global_step4" && eval "$mutation")
  local before
  before=$(md5sum "$ck/metrics.jsonl")
  expect_usage_error_mpi "bad checkpoint: $name" "$pattern" zt 2 2 "$ck" --max_steps 8 --resume_from_checkpoint auto
  [[ "$(md5sum "$ck/metrics.jsonl")" == "$before" ]] || fail "bad checkpoint $name: metrics.jsonl was touched"
}
bad corrupt "zero_rank_1_optim_states.h5: checksum mismatch" \
  'printf "\\x55" | dd of=zero_rank_1_optim_states.h5 bs=1 seek=5000 conv=notrunc status=none'
bad missing "zero_rank_0_optim_states.h5: missing" 'rm zero_rank_0_optim_states.h5'
bad truncated "zero_rank_1_optim_states.h5: [0-9]+ bytes, the manifest says" 'truncate -s 4096 zero_rank_1_optim_states.h5'
bad no_manifest "manifest.json: no checkpoint here" 'rm manifest.json'
bad wrong_partitions "disagree with the manifest|partitions for world size" \
  'sed -i "s/\"world_size\":2/\"world_size\":3/" manifest.json'
sed 's/"n_embd": 128/"n_embd": 64/' "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" >"$WORK/other_model.json"
expect_usage_error "different model config" "manifest.json: model config differs: n_embd is 128 in the checkpoint, 64 now" \
  "$ZEROTRAIN" --deepspeed "$WORK/z0.json" --config_name "$WORK/other_model.json" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/save1" --max_steps 8 --block_size 32 --resume_from_checkpoint auto
finish
