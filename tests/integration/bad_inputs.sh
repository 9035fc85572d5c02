#!/usr/bin/env bash
# The bad-input corpus (tests/bad_inputs/*.case, format in its README.md): each case's exit code,
# exactly one error line from the program matching the case's pattern, within 30 s, and the
# output directory of a finished run unchanged, byte for byte (its lock file's holder line aside).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CORPUS=$ZT_SOURCE_DIR/tests/bad_inputs
DATA=$WORK/data
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$DATA" 2>/dev/null
DEMO=$ZT_SOURCE_DIR/configs/models/gpt2-demo.json
DS=$ZT_SOURCE_DIR/configs/zero1.json
OUT=$WORK/run
"$ZEROTRAIN" --deepspeed "$DS" --config_name "$DEMO" --train_data "$DATA/train_*.bin" --output_dir "$OUT" \
  --max_steps 2 --block_size 64 --per_device_train_batch_size 2 --disable_tqdm 2>"$WORK/run.log" ||
  { echo "FAILED: the reference run: $(tail -2 "$WORK/run.log")"; exit 1; }
# The lock file aside: a run that takes the directory's lock writes its host and pid there before
# it finds a problem later in its set-up (docs/formats.md, .zerotrain.lock).
snapshot() { (cd "$OUT" && find . ! -name .zerotrain.lock -print0 | sort -z | xargs -0 -I{} sh -c 'if [ -f "{}" ]; then sha256sum "{}"; else echo "dir {}"; fi'); }
before=$(snapshot)

field() { sed -n "s/^$1: //p" "$2"; }
expand() {
  local t=$1
  t=${t//\{OUT\}/$OUT}; t=${t//\{CKPT\}/$OUT}; t=${t//\{DATA\}/$DATA/train_*.bin}; t=${t//\{DEMO\}/$DEMO}
  t=${t//\{DS\}/$DS}; t=${t//\{FILES\}/$CORPUS/files}; t=${t//\{S\}/$S}
  printf '%s' "$t"
}
cases=0
for case in "$CORPUS"/*.case; do
  name=$(basename "$case" .case)
  cases=$((cases + 1))
  S=$WORK/case_$name
  mkdir -p "$S"
  tool=$(field tool "$case")
  want_exit=$(field exit "$case")
  pattern=$(field error "$case")
  setup=$(expand "$(field setup "$case")")
  read -ra args <<<"$(expand "$(field args "$case")")"
  case $tool in
    zerotrain) cmd=("$ZEROTRAIN" --disable_tqdm "${args[@]}"); prefix=zerotrain ;;
    zerotrain_mpi) cmd=(mpirun -np 2 --oversubscribe "$ZEROTRAIN" --disable_tqdm "${args[@]}"); prefix=zerotrain ;;
    zero_to_fp32 | zero_estimate | zero_prepare_data | zero_generate | zero_aio_tune) cmd=("$ZT_BIN_DIR/tools/$tool" "${args[@]}"); prefix=$tool ;;
    *) fail "$name: unknown tool '$tool'"; continue ;;
  esac
  # The setup and the program in one shell, so that a setup's ulimit applies to the program.
  ( cd "$S" && eval "$setup" && exec timeout 30 "${cmd[@]}" ) >"$S/stdout" 2>"$S/stderr"
  rc=$?
  errors=$(grep -E "^$prefix: (error: )?(rank [0-9]+: )?" "$S/stderr" | grep -E "^$prefix: error: " || true)
  n=$(printf '%s\n' "$errors" | grep -c . || true)
  after=$(snapshot)
  if [[ $rc -ne $want_exit ]]; then
    fail "$name: exit $rc, wanted $want_exit: $(tail -2 "$S/stderr")"
  elif [[ $n -ne 1 ]] || ! grep -qE -- "$pattern" <<<"$errors"; then
    fail "$name: $n error lines, wanted one matching /$pattern/: $errors"
  elif [[ $before != "$after" ]]; then
    fail "$name: the output directory changed: $(diff <(echo "$before") <(echo "$after") | head -4)"
  else
    pass "$name (exit $rc): $(field what "$case")"
  fi
done
((cases >= 15)) || fail "only $cases cases found in $CORPUS"
finish
