#!/usr/bin/env bash
# DeepSpeed's tensorboard and csv_monitor blocks through the trainer: rank 0 alone writes, under
# output_path/job_name, DeepSpeed's tags indexed by samples seen, and TensorBoard's own reader
# (EventAccumulator) and Python's csv module read back the values metrics.jsonl holds, across a
# resume (a second event file, the CSVs appended).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
install_pylib
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" --val_fraction 0.1 2>/dev/null
CHECK=(env PYTHONPATH="$PYLIB" /usr/bin/python3 "$ZT_SOURCE_DIR/tests/integration/check_monitors.py")
config() {  # config FILE PRECISION_BLOCK MONITOR_OUTPUT_PATH
  cat >"$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, $2
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 2},
 "tensorboard": {"enabled": true, "output_path": "$3", "job_name": "tb_job"},
 "csv_monitor": {"enabled": true, "output_path": "$3", "job_name": "csv_job"}}
JSON
}
run() {  # run CONFIG OUTPUT_DIR [FLAGS...]: 2 ranks
  local cfg=$1 out=$2
  shift 2
  timeout 300 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$ZEROTRAIN" --deepspeed "$cfg" \
    --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" --train_data "$DATA/train_*.bin" \
    --eval_data "$DATA/val_*.bin" --max_eval_samples 16 --block_size 64 --output_dir "$out" --disable_tqdm "$@"
}

# fp16 (loss_scale too), 10 steps with evals at 0, 5 and 10, then a resume to 14.
config "$WORK/fp16.json" '"fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 3},' "$WORK/monitors"
run "$WORK/fp16.json" "$WORK/fp16" --max_steps 10 --eval_on_start --eval_steps 5 2>"$WORK/fp16.log" &&
  run "$WORK/fp16.json" "$WORK/fp16" --max_steps 14 --eval_steps 5 --resume_from_checkpoint auto 2>>"$WORK/fp16.log" ||
  fail "fp16 run: $(tail -3 "$WORK/fp16.log")"
if "${CHECK[@]}" "$WORK/fp16/metrics.jsonl" --tensorboard "$WORK/monitors/tb_job" --csv "$WORK/monitors/csv_job" \
     --loss_index after --scheduled next >"$WORK/check_fp16.log" 2>&1; then
  pass "fp16, 2 ranks, a resume: TensorBoard and CSV hold metrics.jsonl's loss, lr, loss_scale and eval loss"
else
  fail "fp16 monitors: $(grep -v '^ok:' "$WORK/check_fp16.log" | head -5)"
fi
grep -q "tensorboard: $WORK/monitors/tb_job" "$WORK/fp16.log" && grep -q "csv_monitor: $WORK/monitors/csv_job" "$WORK/fp16.log" &&
  pass "the log says where the monitors write" || fail "no monitor directories in the log"
# The loss scale starts as DeepSpeed's Python int (2^12 = 4096) and is a float once it changed.
if head -3 "$WORK/monitors/csv_job/Train_Samples_loss_scale.csv" | tr -d '\r' | grep -qx '8,4096' &&
   grep -qE '^[0-9]+,8192\.0' "$WORK/monitors/csv_job/Train_Samples_loss_scale.csv"; then
  pass "loss_scale.csv: 4096 as an int until it first changes, then 8192.0"
else
  fail "loss_scale.csv: $(head -4 "$WORK/monitors/csv_job/Train_Samples_loss_scale.csv" | tr '\r\n' '  ')"
fi

# bf16, the default output_path "" (the working directory), no loss_scale tag.
config "$WORK/bf16.json" '"bf16": {"enabled": true},' ""
mkdir -p "$WORK/cwd"
(cd "$WORK/cwd" && run "$WORK/bf16.json" "$WORK/bf16" --max_steps 6 2>"$WORK/bf16.log") || fail "bf16 run: $(tail -3 "$WORK/bf16.log")"
if "${CHECK[@]}" "$WORK/bf16/metrics.jsonl" --tensorboard "$WORK/cwd/tb_job" --csv "$WORK/cwd/csv_job" \
     --loss_index after --scheduled next >"$WORK/check_bf16.log" 2>&1 &&
   [[ ! -e $WORK/cwd/csv_job/Train_Samples_loss_scale.csv ]]; then
  pass "bf16 with output_path \"\": the monitors write under the working directory, without loss_scale"
else
  fail "bf16 monitors: $(grep -v '^ok:' "$WORK/check_bf16.log" | head -5)"
fi

# A monitor directory that cannot be made: one line naming it, exit 2, before training.
touch "$WORK/a_file"
config "$WORK/bad.json" '' "$WORK/a_file/sub"
expect_usage_error_mpi "unwritable output_path" "$WORK/a_file/sub" run "$WORK/bad.json" "$WORK/bad" --max_steps 2
[[ ! -e $WORK/bad/metrics.jsonl ]] && pass "nothing written after a bad output_path" || fail "metrics.jsonl written"
finish
