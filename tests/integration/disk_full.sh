#!/usr/bin/env bash
# A full disk (a small tmpfs as the output directory) while training, saving, consolidating and
# logging: a non-zero exit, a message that names the file, and what was there before intact
# (metrics.jsonl ends with a whole line; `latest` names a checkpoint that loads; a model exported
# before keeps its bytes, and no temporary is left behind). Needs root to mount the tmpfs: without
# it the test reports itself skipped (exit 77). Every failure here is exit 1 (an I/O error, not bad input).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TO_FP32=$ZT_BIN_DIR/tools/zero_to_fp32
DISK=$WORK/disk
mkdir -p "$DISK"
if ! mount -t tmpfs -o size=20m tmpfs "$DISK" 2>"$WORK/mount.log"; then
  echo "SKIPPED: cannot mount a tmpfs here ($(cat "$WORK/mount.log")); run as root"
  exit 77
fi
trap 'umount "$DISK" 2>/dev/null; rm -rf "$WORK"' EXIT
# disk_with_free BYTES: empties the tmpfs, then fills it but for about BYTES.
disk_with_free() {
  rm -rf "${DISK:?}"/*
  local avail
  avail=$(($(stat -f -c '%a * %S' "$DISK")))
  head -c $((avail - $1)) /dev/zero >"$DISK/filler"
}
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" 2>/dev/null
demo=(--deepspeed "$ZT_SOURCE_DIR/configs/zero1.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json"
      --train_data "$DATA/train_*.bin" --block_size 64 --per_device_train_batch_size 4 --disable_tqdm)
all_lines_parse() { /usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$1"; }

# ---- training: metrics.jsonl fills the disk, at 2 ranks ----
disk_with_free 20000
timeout 120 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$ZEROTRAIN" "${demo[@]}" --output_dir "$DISK/train" \
  --max_steps 400 --save_strategy no --logging_steps 1 >"$WORK/train.log" 2>&1
rc=$?
if [[ $rc -eq 1 ]] && grep -q "$DISK/train/metrics.jsonl: write failed: No space left on device" "$WORK/train.log" &&
   all_lines_parse "$DISK/train/metrics.jsonl"; then
  pass "metrics.jsonl on a full disk: exit $rc on every rank, the file named, every line whole"
else
  fail "metrics.jsonl on a full disk: exit $rc: $(grep -m2 error "$WORK/train.log")"
fi

# ---- saving: the second checkpoint does not fit; the first stays `latest` and loads ----
rm -rf "${DISK:?}"/*
"$ZEROTRAIN" "${demo[@]}" --output_dir "$DISK/save" --max_steps 6 --save_steps 2 2>"$WORK/save.log"
rc=$?
if [[ $rc -eq 1 ]] && grep -q "$DISK/save/global_step4: not enough disk space" "$WORK/save.log" &&
   [[ $(cat "$DISK/save/latest") == global_step2 ]] &&
   "$TO_FP32" "$DISK/save" "$WORK/save_hf" 2>/dev/null &&
   "$ZEROTRAIN" "${demo[@]}" --output_dir "$DISK/save" --resume_from_checkpoint auto --max_steps 3 \
     --save_strategy no 2>/dev/null; then
  pass "a save on a full disk: exit $rc naming the checkpoint; latest is global_step2, which exports and resumes"
else
  fail "a save on a full disk: exit $rc: $(tail -1 "$WORK/save.log"); latest $(cat "$DISK/save/latest" 2>/dev/null)"
fi

# ---- zero_to_fp32: a bf16 export fits, an fp32 one over it does not ----
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/ckpt" --max_steps 2 2>/dev/null
disk_with_free 3000000
"$TO_FP32" "$WORK/ckpt" "$DISK/hf" --dtype bf16 2>"$WORK/hf1.log" || fail "bf16 export: $(cat "$WORK/hf1.log")"
before=$(cd "$DISK/hf" && sha256sum ./* | sort)
"$TO_FP32" "$WORK/ckpt" "$DISK/hf" --overwrite 2>"$WORK/hf2.log"
rc=$?
after=$(cd "$DISK/hf" && sha256sum ./* | sort)
if [[ $rc -eq 1 ]] && grep -qE "^zero_to_fp32: error: $DISK/hf/model.safetensors.tmp: write failed: No space left on device$" "$WORK/hf2.log" &&
   [[ $before == "$after" ]] && [[ -z $(find "$DISK/hf" -name '*.tmp') ]]; then
  pass "zero_to_fp32 on a full disk: exit $rc naming the file; the bf16 model before it unchanged, no temporary left"
else
  fail "zero_to_fp32 on a full disk: exit $rc: $(cat "$WORK/hf2.log"); files: $(ls "$DISK/hf")"
fi
disk_with_free 100000
"$TO_FP32" "$WORK/ckpt" "$DISK/hf5" --hdf5 2>"$WORK/hf5.log"
rc=$?
if [[ $rc -eq 1 ]] && grep -q "$DISK/hf5/model.h5.tmp" "$WORK/hf5.log" && [[ -z $(ls -A "$DISK/hf5") ]]; then
  pass "zero_to_fp32 --hdf5 on a full disk: exit $rc naming model.h5.tmp; nothing left in the directory"
else
  fail "zero_to_fp32 --hdf5 on a full disk: exit $rc: $(cat "$WORK/hf5.log"); files: $(ls -A "$DISK/hf5")"
fi

# ---- the log: stderr into a file on a full disk ----
disk_with_free 0
"$ZEROTRAIN" "${demo[@]}" --output_dir "$WORK/logged" --max_steps 2 2>"$DISK/log"
rc=$?
[[ $rc -eq 1 ]] && pass "a log that cannot be written ends the run non-zero (exit $rc)" ||
  fail "a log on a full disk: exit $rc"
finish
