#!/usr/bin/env bash
# Checkpoints between the GPU and the CPU (label gpu, issue 15): written with --accelerator cuda
# and resumed on the CPU, and the other way round, at 1 and 2 ranks (2 ranks share a one-GPU
# machine's device through the host-staged communicator) and stages 0, 2 and 3; the resumed
# losses match the CPU's uninterrupted run within 1e-5 relative (fp32, TF32 off: the GPU sums in
# another order, so not bit for bit). Exits 77 (skipped) with the reason where no GPU can be used.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
for s in 0 2 3; do
  sed 's/"WarmupDecayLR"/"WarmupLR"/; /total_num_steps/d; s/"warmup_type": "linear",/"warmup_type": "linear"/' \
    "$ZT_SOURCE_DIR/configs/zero$s.json" >"$WORK/z$s.json"
done

zt() {  # zt NP STAGE OUT ARGS...
  local np=$1 stage=$2 out=$3
  shift 3
  OMP_NUM_THREADS=1 timeout 300 mpirun -np "$np" --oversubscribe -x OMP_NUM_THREADS "$ZEROTRAIN" \
    --deepspeed "$WORK/z$stage.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
    --train_data "$DATA/train_*.bin" --output_dir "$out" --block_size 32 --per_device_train_batch_size $((4 / np)) \
    --learning_rate 2e-3 --warmup_steps 2 --seed 5 --disable_tqdm "$@"
}
# Can this build and machine train on a GPU at all? The trainer's own refusal says why not.
if ! zt 1 0 "$WORK/probe" --max_steps 1 --accelerator cuda >/dev/null 2>"$WORK/probe.log"; then
  if grep -qE "built without the CUDA backend|no usable GPU" "$WORK/probe.log"; then
    echo "skipped: $(grep -m1 -oE '(this zerotrain was built without the CUDA backend|no usable GPU).*' "$WORK/probe.log")"
    exit 77
  fi
  fail "a one-step run on the GPU failed: $(tail -3 "$WORK/probe.log")"
  finish
  exit 1
fi

for np in 1 2; do
  for stage in 0 2 3; do
    zt "$np" "$stage" "$WORK/full_${np}_$stage" --max_steps 8 --accelerator cpu 2>/dev/null
    want=$(last_losses "$WORK/full_${np}_$stage/metrics.jsonl" 4)
    for way in cuda:cpu cpu:cuda; do
      tag=${way/:/_to_}_np${np}_s$stage
      zt "$np" "$stage" "$WORK/$tag" --max_steps 4 --save_steps 4 --accelerator "${way%:*}" 2>/dev/null
      zt "$np" "$stage" "$WORK/$tag" --max_steps 8 --resume_from_checkpoint auto --accelerator "${way#*:}" \
        2>"$WORK/$tag.log"
      got=$(last_losses "$WORK/$tag/metrics.jsonl" 4)
      if [[ -n "$want" ]] && close_enough "$want" "$got" 1e-5; then pass "resume $tag"; else fail "resume $tag: [$want] vs [$got] $(tail -2 "$WORK/$tag.log")"; fi
    done
  done
done
finish
