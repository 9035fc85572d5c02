#!/usr/bin/env bash
# zero_aio_tune (issue 32): a short sweep on a directory of this machine's disk prints one table
# row a configuration and the best aio block as JSON, which a ds_config takes as its "aio" block
# (zero_estimate parses the whole config, aio included) and --write_config writes to a new file;
# an existing file is refused and left as it was; --max_seconds stops the sweep and still
# reports; no run leaves a file in the directory, a killed one (SIGTERM, SIGKILL) included; a
# path on tmpfs is refused (where /dev/shm is tmpfs; skipped with the reason otherwise).
source "$(dirname "$0")/lib.sh"
TUNE=$ZT_BIN_DIR/tools/zero_aio_tune
dir=$WORK/drive
mkdir -p "$dir"
short=(--nvme_path "$dir" --io_size_mb 4 --block_sizes 131072,1048576 --queue_depths 4,16 --intra_op_parallelism 1,2
       --no_fio)

if "$TUNE" "${short[@]}" --write_config "$WORK/aio.json" >"$WORK/tune.out" 2>"$WORK/tune.err"; then
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ +(true|false) +(true|false) +[0-9.]+ +[0-9.]+$' "$WORK/tune.out")
  json=$(tail -1 "$WORK/tune.out")
  if [[ $rows -eq 32 ]] && [[ $json == '{"aio":{'* ]] && [[ $(cat "$WORK/aio.json") == "$json" ]]; then
    pass "a sweep of 32 configurations: 32 rows, the best block as JSON, the same in --write_config's file"
  else
    fail "the sweep: $rows rows, last line '$json', file '$(cat "$WORK/aio.json" 2>/dev/null)'"
  fi
else
  fail "zero_aio_tune exited $?: $(tail -3 "$WORK/tune.err")"
fi

# The block goes into a ds_config as it is.
/usr/bin/python3 - "$WORK/aio.json" "$WORK/ds.json" <<'PY'
import json, sys
aio = json.load(open(sys.argv[1]))["aio"]
json.dump({"train_micro_batch_size_per_gpu": 1, "aio": aio,
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}},
          open(sys.argv[2], "w"))
PY
if "$ZT_BIN_DIR/tools/zero_estimate" --deepspeed "$WORK/ds.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  >"$WORK/estimate.log" 2>&1; then
  pass "the printed block loads as a ds_config aio block (zero_estimate)"
else
  fail "the printed block in a ds_config: $(tail -2 "$WORK/estimate.log")"
fi

# An existing --write_config file is refused before the sweep and left as it was.
echo keep >"$WORK/existing.json"
"$TUNE" "${short[@]}" --write_config "$WORK/existing.json" >/dev/null 2>"$WORK/existing.err"
code=$?
if [[ $code -eq 2 ]] && grep -q "existing.json exists; give a new file" "$WORK/existing.err" &&
   [[ $(cat "$WORK/existing.json") == keep ]]; then
  pass "an existing --write_config file: exit 2, named, untouched"
else
  fail "an existing --write_config file: exit $code, $(cat "$WORK/existing.err")"
fi

# --max_seconds: the first configuration always runs; past the budget the sweep stops and reports.
"$TUNE" --nvme_path "$dir" --io_size_mb 8 --no_fio --max_seconds 0.001 >"$WORK/budget.out" 2>"$WORK/budget.err"
code=$?
if [[ $code -eq 0 ]] && grep -q "stopped after 1 of 108 configurations" "$WORK/budget.err" &&
   [[ $(tail -1 "$WORK/budget.out") == '{"aio":{'* ]]; then
  pass "--max_seconds: stopped after 1 of 108 configurations, the best of those printed"
else
  fail "--max_seconds: exit $code, $(tail -2 "$WORK/budget.err")"
fi

# Nothing is left behind, whatever ends the run.
for sig in TERM KILL; do
  "$TUNE" --nvme_path "$dir" --io_size_mb 64 --no_fio >/dev/null 2>&1 &
  pid=$!
  sleep 1
  kill -$sig $pid 2>/dev/null
  wait $pid 2>/dev/null
done
if [[ -z $(ls -A "$dir") ]]; then
  pass "no file left in --nvme_path after the runs, one killed by SIGTERM and one by SIGKILL"
else
  fail "left in --nvme_path: $(ls -A "$dir" | head -3)"
fi

if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
  "$TUNE" --nvme_path /dev/shm --no_fio >/dev/null 2>"$WORK/shm.err"
  code=$?
  if [[ $code -eq 2 ]] && grep -q "/dev/shm is on tmpfs (memory, not a drive)" "$WORK/shm.err"; then
    pass "a path on tmpfs is refused with the reason"
  else
    fail "--nvme_path /dev/shm: exit $code, $(cat "$WORK/shm.err")"
  fi
else
  echo "skipped: the tmpfs refusal (/dev/shm is not tmpfs here)"
fi
finish
