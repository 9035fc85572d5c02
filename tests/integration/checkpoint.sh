#!/usr/bin/env bash
# Checkpoints end to end: bit-exact resume at 1 and 2 ranks for every stage, and between the CPU
# and the emulated device; resharding 2->1,
# 1->2 and 2->4 across stages; MiCS's (the first shard group's) and ZeRO++'s (with offload)
# resumed and resharded; a kill -9
# at many points of a save leaves `latest` loadable; a
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
  [[ -n "${ZT_SHM_NODE_SIZE:-}" ]] && forward+=(-x ZT_SHM_COLLECTIVES -x ZT_SHM_NODE_SIZE)
  OMP_NUM_THREADS=1 timeout 300 mpirun -np "$np" --oversubscribe "${forward[@]}" "$ZEROTRAIN" \
    --deepspeed "$WORK/z$stage.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --output_dir "$out" --block_size 32 --per_device_train_batch_size $((4 / np)) \
    --learning_rate 2e-3 --warmup_steps 2 --seed 5 --disable_tqdm "$@"
}
# resumed NAME FULL CUT LOG: the last 4 losses of the run resumed in CUT equal FULL's uninterrupted
# run's bit for bit.
resumed() {
  local want got
  want=$(last_losses "$2/metrics.jsonl" 4)
  got=$(last_losses "$3/metrics.jsonl" 4)
  if [[ -n "$want" && "$want" == "$got" ]]; then
    pass "resume $1 bit-exact"
  else
    fail "resume $1: [$want] vs [$got] $(tail -2 "$4")"
  fi
}
# ---- bit-exact resume, every stage, 1 and 2 ranks ----
for np in 1 2; do
  for stage in 0 1 2 3; do
    tag=np${np}_s$stage
    zt "$np" "$stage" "$WORK/full_$tag" --max_steps 8 2>/dev/null
    zt "$np" "$stage" "$WORK/cut_$tag" --max_steps 4 --save_steps 4 2>/dev/null
    zt "$np" "$stage" "$WORK/cut_$tag" --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/$tag.log"
    resumed "$tag" "$WORK/full_$tag" "$WORK/cut_$tag" "$WORK/$tag.log"
  done
done

# ---- across backends (issue 14): written on the emulated device, resumed on the CPU, and the
# other way round, bit-exact against the CPU's uninterrupted run (fp32 is the same arithmetic) ----
for stage in 0 1 2 3; do
  for way in emulated:cpu cpu:emulated; do
    tag=${way/:/_to_}_s$stage
    zt 2 "$stage" "$WORK/x_$tag" --max_steps 4 --save_steps 4 --accelerator "${way%:*}" 2>/dev/null
    zt 2 "$stage" "$WORK/x_$tag" --max_steps 8 --resume_from_checkpoint auto --accelerator "${way#*:}" 2>"$WORK/x_$tag.log"
    resumed "$tag" "$WORK/full_np2_s$stage" "$WORK/x_$tag" "$WORK/x_$tag.log"
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

# ---- MiCS (issue 34): 4 ranks in shard groups of 2; the first group alone writes, a stage-3
# checkpoint of 2 ranks; resumed bit-exact as it was, and at 2 ranks of plain stage 3 ----
sed 's/"stage": 3,/"stage": 3, "mics_shard_size": 2,/' "$WORK/z3.json" >"$WORK/zmics.json"
zt 4 mics "$WORK/full_mics" --max_steps 8 2>/dev/null
zt 4 mics "$WORK/cut_mics" --max_steps 4 --save_steps 4 2>/dev/null
shards=$(ls "$WORK/cut_mics/global_step4" | grep -c '^zero_rank_.*optim_states.h5$')
[[ $shards -eq 2 ]] && pass "MiCS: one shard group's 2 shards written" || fail "MiCS: $shards shards written"
zt 4 mics "$WORK/cut_mics" --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/mics.log"
resumed MiCS "$WORK/full_mics" "$WORK/cut_mics" "$WORK/mics.log"
reshard "mics 4 in 2x2->2x3" "$WORK/cut_mics/global_step4" 2 3 "$WORK/full_mics/metrics.jsonl"

# ---- ZeRO++ (issue 34): hpZ, qwZ and qgZ together with ZeRO-Offload's optimizer, 4 ranks as 2
# simulated nodes of 2 (qgZ's two levels need them); units released after use, so hpZ's secondary
# copy serves backward. Resumed bit-exact; and as the stage-3 checkpoint it is, resumed at 2 ranks
# without ZeRO++ as at 4 ----
sed -e 's/"stage": 3,/"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,/' \
  -e 's/"stage": 3,/"stage": 3, "zero_quantized_gradients": true, "offload_optimizer": {"device": "cpu"},/' \
  -e 's/"stage3_max_reuse_distance": 1e9/"stage3_max_reuse_distance": 0/' "$WORK/z3.json" >"$WORK/zzeropp.json"
export ZT_SHM_COLLECTIVES=1 ZT_SHM_NODE_SIZE=2
zt 4 zeropp "$WORK/full_zeropp" --max_steps 8 2>/dev/null
zt 4 zeropp "$WORK/cut_zeropp" --max_steps 4 --save_steps 4 2>/dev/null
zt 4 zeropp "$WORK/cut_zeropp" --max_steps 8 --resume_from_checkpoint auto 2>"$WORK/zeropp.log"
unset ZT_SHM_COLLECTIVES ZT_SHM_NODE_SIZE
resumed "ZeRO++ (hpZ, qwZ, qgZ, offload)" "$WORK/full_zeropp" "$WORK/cut_zeropp" "$WORK/zeropp.log"
sed 's/"stage": 3,/"stage": 3, "offload_optimizer": {"device": "cpu"},/' "$WORK/z3.json" >"$WORK/z3offload.json"
zt 4 3offload "$WORK/zeropp_as_plain" --max_steps 8 --resume_from_checkpoint "$WORK/cut_zeropp/global_step4" \
  2>/dev/null
reshard "zero++ 4->2 ranks" "$WORK/cut_zeropp/global_step4" 2 3offload "$WORK/zeropp_as_plain/metrics.jsonl"

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
resign_manifest() {  # manifest_crc32 = CRC-32 of the bytes before the member
  /usr/bin/python3 - "$1" <<'PY'
import sys, zlib
text = open(sys.argv[1], "rb").read()
body = text[:text.rindex(b',"manifest_crc32":')]
open(sys.argv[1], "wb").write(body + b',"manifest_crc32":%d}' % zlib.crc32(body))
PY
}
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
# An edited manifest fails its own checksum; edited and re-signed (as docs/formats.md says, by a
# signer written independently of ours), it fails the check of what was edited.
bad edited_manifest "manifest.json: manifest_crc32: checksum mismatch" \
  'sed -i "s/\"world_size\":2/\"world_size\":3/" manifest.json'
bad wrong_partitions "manifest.json: partitions: 2 partitions for world_size 3" \
  'sed -i "s/\"world_size\":2/\"world_size\":3/" manifest.json && resign_manifest manifest.json'
sed 's/"n_embd": 128/"n_embd": 64/' "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" >"$WORK/other_model.json"
expect_usage_error "different model config" "manifest.json: model config differs: n_embd is 128 in the checkpoint, 64 now" \
  "$ZEROTRAIN" --deepspeed "$WORK/z0.json" --config_name "$WORK/other_model.json" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/save1" --max_steps 8 --block_size 32 --resume_from_checkpoint auto

# ---- zero_to_fp32: stage 3 shards from 2 ranks -> HF safetensors -> --model_name_or_path ----
TO_FP32="$ZT_BIN_DIR/tools/zero_to_fp32"
OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$ZEROTRAIN" \
  --deepspeed "$WORK/z3.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$DATA/train_*.bin" --eval_data "$DATA/val_*.bin" --output_dir "$WORK/exp" --block_size 32 \
  --per_device_train_batch_size 2 --max_steps 6 --save_steps 6 --do_eval --max_eval_samples 32 --disable_tqdm 2>/dev/null
if "$TO_FP32" "$WORK/exp" "$WORK/hf" --max_shard_size 1MB 2>"$WORK/hf.log"; then pass "zero_to_fp32 exits 0"; else fail "zero_to_fp32: $(cat "$WORK/hf.log")"; fi
# An independent reading of the files: header length, JSON header, contiguous data, the index.
/usr/bin/python3 - "$WORK/hf" <<'PY' && pass "safetensors parse independently; index and config.json complete" || fail "safetensors layout"
import json, os, struct, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
assert len(files) > 1, files
seen = {}
for f in files:
    raw = open(os.path.join(d, f), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        count = 1
        for x in t["shape"]:
            count *= x
        assert t["dtype"] == "F32" and e - b == 4 * count, (name, t)
        end = max(end, e)
        seen[name] = (f, t["shape"])
    assert 8 + n + end == len(raw), (f, 8 + n + end, len(raw))
assert seen.keys() == index["weight_map"].keys()
assert seen["transformer.h.0.attn.c_attn.weight"][1] == [128, 384]
cfg = json.load(open(os.path.join(d, "config.json")))
assert cfg["model_type"] == "gpt2" and cfg["n_embd"] == 128 and cfg["n_layer"] == 4, cfg
PY
# Imported at the same world size and stage the eval runs the same arithmetic: identical loss.
OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$ZEROTRAIN" \
  --deepspeed "$WORK/z3.json" --model_name_or_path "$WORK/hf" --eval_data "$DATA/val_*.bin" \
  --output_dir "$WORK/imported" --block_size 32 --do_eval --max_eval_samples 32 2>"$WORK/imported.log"
/usr/bin/python3 - "$WORK/exp/metrics.jsonl" "$WORK/imported/metrics.jsonl" <<'PY' && pass "export then import gives the identical eval loss" || fail "import eval loss: $(tail -2 "$WORK/imported.log")"
import json, sys
def ev(p): return [l["eval_loss"] for l in map(json.loads, open(p)) if l["event"] == "eval"]
a, b = ev(sys.argv[1]), ev(sys.argv[2])
print("eval_loss trained", a[-1], "imported", b[-1])
assert a[-1] == b[-1], (a, b)
PY
expect_usage_error "zero_to_fp32 refuses to overwrite" "already exists; pass --overwrite" "$TO_FP32" "$WORK/exp" "$WORK/hf"
cp -r "$WORK/exp" "$WORK/exp_bad"
printf '\x55' | dd of="$WORK/exp_bad/global_step6/zero_rank_0_optim_states.h5" bs=1 seek=3000 conv=notrunc status=none
# By default zero_to_fp32 checks the chunks it reads (test_checkpoint_export corrupts the master
# weights and the moments on purpose); --verify_whole_files checks every byte of every file.
expect_usage_error "zero_to_fp32 --verify_whole_files on a corrupt shard" "zero_rank_0_optim_states.h5: checksum mismatch" \
  "$TO_FP32" "$WORK/exp_bad" "$WORK/hf_bad" --verify_whole_files
[[ -e "$WORK/hf_bad" ]] && fail "zero_to_fp32 wrote output for a corrupt checkpoint" || pass "nothing written for a corrupt checkpoint"
finish
