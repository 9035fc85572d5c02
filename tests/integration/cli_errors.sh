#!/usr/bin/env bash
# Bad input never crashes and never overwrites: each case gets one clear line naming the file,
# key or flag, and exit code 2.
source "$(dirname "$0")/lib.sh"

DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
MODEL=$ZT_SOURCE_DIR/configs/models/gpt2-demo.json
DS=$ZT_SOURCE_DIR/configs/zero0.json
# train [--deepspeed FILE] [--block_size N] ...: the defaults below unless given.
train() {
  local ds=$DS block=32
  local args=()
  while (($#)); do
    case $1 in
      --deepspeed) ds=$2; shift 2 ;;
      --block_size) block=$2; shift 2 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  "$ZEROTRAIN" --deepspeed "$ds" --config_name "$MODEL" --max_steps 2 --per_device_train_batch_size 2 \
    --block_size "$block" --disable_tqdm "${args[@]}"
}

expect_usage_error "missing shards" "$WORK/nothing_\*.bin: no file matches" \
  train --train_data "$WORK/nothing_*.bin" --output_dir "$WORK/o1"
head -c 100 "$DATA/train_000000.bin" >"$WORK/short.bin"
expect_usage_error "short shard" "short.bin: not a token shard" train --train_data "$WORK/short.bin" --output_dir "$WORK/o2"
head -c 5000 "$DATA/train_000000.bin" >"$WORK/trunc.bin"
expect_usage_error "truncated shard" "trunc.bin: the header promises .* truncated or corrupt" \
  train --train_data "$WORK/trunc.bin" --output_dir "$WORK/o3"
printf 'garbage%.0s' {1..300} >"$WORK/corrupt.bin"
expect_usage_error "corrupt shard" "corrupt.bin: bad magic" train --train_data "$WORK/corrupt.bin" --output_dir "$WORK/o4"
sed 's/"vocab_size": 256/"vocab_size": 100/' "$MODEL" >"$WORK/small_vocab.json"
expect_usage_error "token id >= vocab" "train_000000.bin: token [0-9]+ at position [0-9]+ is >= vocab_size 100" \
  "$ZEROTRAIN" --deepspeed "$DS" --config_name "$WORK/small_vocab.json" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/o5" --max_steps 1
expect_usage_error "bad ZT_BF16_GEMM" "ZT_BF16_GEMM must be auto, bf16 or fp32, got 'bogus'" \
  env ZT_BF16_GEMM=bogus "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/o_env" --max_steps 1 --bf16
expect_usage_error "bad ZT_BF16_WEIGHT_PACKS" "ZT_BF16_WEIGHT_PACKS must be 0 or 1, got 'yes'" \
  env ZT_BF16_WEIGHT_PACKS=yes "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --train_data "$DATA/train_*.bin" \
  --output_dir "$WORK/o_env2" --max_steps 1 --bf16
printf '{\n  "train_micro_batch_size_per_gpu": 2,\n  "steps_per_print" 5\n}\n' >"$WORK/bad.json"
expect_usage_error "malformed JSON" "bad.json:3:21: malformed JSON" \
  train --deepspeed "$WORK/bad.json" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o6"
printf '{"zero_optimization": {"stage": 0, "contigous_gradients": true}}' >"$WORK/typo.json"
expect_usage_error "misspelled key" "typo.json: zero_optimization.contigous_gradients: unknown key; did you mean 'zero_optimization.contiguous_gradients'" \
  train --deepspeed "$WORK/typo.json" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o7"
printf '{"gradient_clipping": -1}' >"$WORK/neg.json"
expect_usage_error "bad value" "neg.json: gradient_clipping: must be >= 0" \
  train --deepspeed "$WORK/neg.json" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o8"
expect_usage_error "unknown flag" "unknown flag --learning_rat; did you mean --learning_rate" \
  train --learning_rat 1 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9"
expect_usage_error "--delayed_param_update without offload" \
  "--delayed_param_update overlaps ZeRO-Offload's CPU optimizer step with the next step: it needs zero_optimization.offload_optimizer on .* in .*zero0.json" \
  train --delayed_param_update --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9d"
expect_usage_error "--delayed_param_update_warmup alone" "--delayed_param_update_warmup does nothing without --delayed_param_update" \
  train --delayed_param_update_warmup 5 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9e"
expect_usage_error "--delayed_param_update_warmup -1" "--delayed_param_update_warmup must be >= 0, got -1" \
  train --delayed_param_update --delayed_param_update_warmup -1 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9f"
# Flags are held to the ranges of the config keys they fill through "auto" (the config here has
# lr, betas and weight_decay "auto"): inf trained and wrote "lr":NaN before.
expect_usage_error "--learning_rate inf" "^zerotrain: error: --learning_rate must be a finite number, got inf" \
  train --learning_rate inf --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9a"
expect_usage_error "--weight_decay nan" "^zerotrain: error: --weight_decay must be a finite number, got nan" \
  train --weight_decay nan --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9b"
expect_usage_error "--adam_beta1 1.5" "^zerotrain: error: --adam_beta1 and --adam_beta2 must be below 1, got 1.5 and 0.999" \
  train --adam_beta1 1.5 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9c"
expect_usage_error "--activation_dtype fp8" "^zerotrain: error: --activation_dtype must be auto, fp32 or bf16, got 'fp8'" \
  train --activation_dtype fp8 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9d"
expect_usage_error "--classifier_chunk_tokens -3" "^zerotrain: error: --classifier_chunk_tokens must be auto, 0 .*or a number of tokens, got '-3'" \
  train --classifier_chunk_tokens -3 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9g"
expect_usage_error "bf16 activations, fp16 training" "--activation_dtype bf16 with fp16 training is not implemented" \
  train --activation_dtype bf16 --fp16 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9e"
expect_usage_error "--tf32 on the CPU" "--tf32 needs a GPU with TF32 \(Ampere or newer\); the cpu backend" \
  train --tf32 --accelerator cpu --train_data "$DATA/train_*.bin" --output_dir "$WORK/o9f"
expect_usage_error "missing config" "nope.json: cannot open file" \
  train --deepspeed "$WORK/nope.json" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o10"
expect_usage_error "block_size > n_positions" "block_size 4096 exceeds n_positions" \
  train --block_size 4096 --train_data "$DATA/train_*.bin" --output_dir "$WORK/o11"

# Special files (issue 13): /dev/zero was read forever, a FIFO blocked the open forever and a
# symlink loop exited 1 with a vague message. Each is refused at once with one line naming the
# path; a hang ends in timeout's exit 124 or 137 (-k: the trainer catches SIGTERM), a failure.
mkfifo "$WORK/fifo.json"
ln -s loop_b.json "$WORK/loop_a.json"
ln -s loop_a.json "$WORK/loop_b.json"
quick() {  # quick DS MODEL ARGS...: one short training run, killed after 20 s
  local ds=$1 model=$2
  shift 2
  timeout -k 5 20 "$ZEROTRAIN" --deepspeed "$ds" --config_name "$model" --max_steps 2 --per_device_train_batch_size 2 \
    --block_size 32 --disable_tqdm "$@"
}
expect_usage_error "/dev/zero as --deepspeed" "^zerotrain: error: /dev/zero: not a regular file \(a character device\)$" \
  quick /dev/zero "$MODEL" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o12"
expect_usage_error "/dev/zero as --config_name" "^zerotrain: error: /dev/zero: not a regular file \(a character device\)$" \
  quick "$DS" /dev/zero --train_data "$DATA/train_*.bin" --output_dir "$WORK/o13"
expect_usage_error "FIFO as --deepspeed" "^zerotrain: error: $WORK/fifo.json: not a regular file \(a FIFO\)$" \
  quick "$WORK/fifo.json" "$MODEL" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o14"
expect_usage_error "FIFO as --train_data" "^zerotrain: error: $WORK/fifo.json: not a regular file \(a FIFO\)$" \
  quick "$DS" "$MODEL" --train_data "$WORK/fifo.json" --output_dir "$WORK/o15"
expect_usage_error "symlink loop as --deepspeed" \
  "^zerotrain: error: $WORK/loop_a.json: cannot open file: Too many levels of symbolic links" \
  quick "$WORK/loop_a.json" "$MODEL" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o16"
expect_usage_error "directory as --config_name" "^zerotrain: error: $WORK: not a regular file \(a directory\)$" \
  quick "$DS" "$WORK" --train_data "$DATA/train_*.bin" --output_dir "$WORK/o17"

# Started by torchrun or the deepspeed launcher (WORLD_SIZE set, MPI sees one process): refused at
# once with one line holding the mpirun and srun commands for the same arguments; RANK 0 says it,
# the others exit 2 quietly. The suggested mpirun command, pasted, trains as one 2-rank job.
expect_usage_error "WORLD_SIZE=2 without mpirun (torchrun)" \
  "^zerotrain: error: started by torchrun or the deepspeed launcher \(WORLD_SIZE=2, RANK=0\) but MPI sees 1 process.*launch with \`mpirun -np 2 $ZEROTRAIN --deepspeed .* --train_data '$DATA/train_\*.bin' --output_dir $WORK/o18\` or \`srun --ntasks=2 $ZEROTRAIN --deepspeed " \
  env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --max_steps 2 \
  --per_device_train_batch_size 2 --block_size 32 --disable_tqdm --train_data "$DATA/train_*.bin" --output_dir "$WORK/o18"
suggested=$(env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --max_steps 2 \
  --per_device_train_batch_size 2 --block_size 32 --disable_tqdm --train_data "$DATA/train_*.bin" --output_dir "$WORK/o18" \
  2>&1 | grep -o '`mpirun [^`]*`' | tr -d '`')
err=$(env WORLD_SIZE=4 RANK=3 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 "$ZEROTRAIN" --output_dir "$WORK/o19" 2>&1)
rc=$?
if [[ $rc -eq 2 && -z $err ]]; then pass "torchrun's RANK 3: exit 2 without a word"; else fail "RANK 3: exit $rc: $err"; fi
expect_usage_error "deepspeed launcher, 2 nodes of 2: --npernode and --ntasks-per-node, without its --local_rank" \
  "\(WORLD_SIZE=4, RANK=0, LOCAL_SIZE=2\).*\`mpirun -np 4 --npernode 2 $ZEROTRAIN --output_dir $WORK/o19\` or \`srun --nodes=2 --ntasks-per-node=2 $ZEROTRAIN --output_dir $WORK/o19\`$" \
  env WORLD_SIZE=4 RANK=0 LOCAL_SIZE=2 "$ZEROTRAIN" --local_rank=0 --output_dir "$WORK/o19"
if [[ ! -e $WORK/o18 && ! -e $WORK/o19 && -n $suggested ]] &&
   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 \
     eval "$suggested" >"$WORK/suggested.log" 2>&1 && grep -q '"world_size":2' "$WORK/o18/metrics.jsonl"; then
  pass "the refused run wrote nothing; its suggested command, pasted, trains on 2 ranks"
else
  fail "suggested [$suggested]: $(ls -d "$WORK"/o18 "$WORK"/o19 2>&1 | tr '\n' ' ') $(tail -3 "$WORK/suggested.log" 2>&1)"
fi
# Not refused: torchrun with one process, and a real mpirun whose ranks inherit WORLD_SIZE=2.
if env WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --max_steps 2 \
     --per_device_train_batch_size 2 --block_size 32 --disable_tqdm --train_data "$DATA/train_*.bin" \
     --output_dir "$WORK/ws1" >"$WORK/ws1.log" 2>&1 && grep -q '"event":"end"' "$WORK/ws1/metrics.jsonl"; then
  pass "WORLD_SIZE=1: trains"
else
  fail "WORLD_SIZE=1: $(tail -3 "$WORK/ws1.log")"
fi
if WORLD_SIZE=2 RANK=0 mpirun -np 2 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x WORLD_SIZE -x RANK \
     "$ZEROTRAIN" --deepspeed "$DS" --config_name "$MODEL" --max_steps 2 --per_device_train_batch_size 2 --block_size 32 \
     --disable_tqdm --train_data "$DATA/train_*.bin" --output_dir "$WORK/ws2" >"$WORK/ws2.log" 2>&1 &&
   grep -q '"world_size":2' "$WORK/ws2/metrics.jsonl"; then
  pass "mpirun -np 2 with WORLD_SIZE=2 set: one 2-rank job"
else
  fail "mpirun with WORLD_SIZE=2: $(tail -3 "$WORK/ws2.log")"
fi

# An existing, non-empty output_dir is left untouched.
mkdir -p "$WORK/existing"
echo precious >"$WORK/existing/metrics.jsonl"
expect_usage_error "existing output_dir" "existing: --output_dir exists and is not empty; pass --overwrite_output_dir" \
  train --train_data "$DATA/train_*.bin" --output_dir "$WORK/existing"
if [[ "$(cat "$WORK/existing/metrics.jsonl")" == precious ]]; then pass "output_dir untouched"; else fail "output_dir was overwritten"; fi
# Nothing was created for the failed runs.
for d in o1 o2 o3 o4 o5 o6 o7 o8 o9 o9a o9b o9c o10 o11 o12 o13 o14 o15 o16 o17; do
  [[ -e "$WORK/$d" ]] && fail "output_dir $d was created by a failed run"
done
pass "no output_dir created by a failed run"

expect_usage_error "prepare_data refuses to overwrite" "train_000000.bin: already exists; pass --overwrite" \
  "$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA"
expect_usage_error "prepare_data missing input" "missing.txt: cannot open file" \
  "$PREPARE" "$WORK/missing.txt" --output_dir "$WORK/d2"
finish
