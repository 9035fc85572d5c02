# Shared helpers for the integration scripts: counters, the expect_* checks, a closing line.
set -uo pipefail
: "${ZT_BIN_DIR:?set by ctest}" "${ZT_SOURCE_DIR:?set by ctest}"
ZEROTRAIN="$ZT_BIN_DIR/src/zerotrain"
PREPARE="$ZT_BIN_DIR/tools/zero_prepare_data"
WORK=$(mktemp -d /tmp/zt_it.XXXXXX)
# ZT_KEEP_WORK=1 keeps the scratch folder (logs, configs, checkpoints) for a failure's post-mortem.
trap '[[ -n ${ZT_KEEP_WORK:-} ]] || rm -rf "$WORK"' EXIT
passed=0
failed=0

# The PyPI test peers (tests/requirements.txt) in $PYLIB, installed once per build directory next
# to Debian's python3-torch; reinstalled when the pins change.
PYLIB=$ZT_BIN_DIR/pylib
install_pylib() {
  if [[ ! -f "$PYLIB/.installed" ]] || ! cmp -s "$ZT_SOURCE_DIR/tests/requirements.txt" "$PYLIB/.installed"; then
    rm -rf "$PYLIB"
    /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-deps --target "$PYLIB" \
      -r "$ZT_SOURCE_DIR/tests/requirements.txt" 2>&1 | grep -v "Running pip as the 'root' user" || true
    cp "$ZT_SOURCE_DIR/tests/requirements.txt" "$PYLIB/.installed"
  fi
}

# last_losses METRICS N: the losses of the last N step lines of a metrics.jsonl.
last_losses() {
  /usr/bin/python3 -c "import json,sys; print(' '.join(repr(l['loss']) for l in map(json.loads, open(sys.argv[1])) if l['event'] == 'step'))" "$1" |
    tr ' ' '\n' | tail -n "$2" | tr '\n' ' '
}
# close_enough "A..." "B..." [TOL]: two loss lists equal within TOL relative (1e-6 unless given).
close_enough() {
  /usr/bin/python3 -c "
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:3]]
tol = float(sys.argv[3])
assert len(a) == len(b) > 0, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f'max relative difference {worst:.2e}')
assert worst <= tol, worst" "$1" "$2" "${3:-1e-6}"
}

# one_batch_shard OUT T B: the shipped corpus's first B windows of T + 1 bytes as one llm.c token
# shard (byte-level, vocab 256): a training set that is exactly one global batch of B windows.
one_batch_shard() {
  /usr/bin/python3 - "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" "$1" "$2" "$3" <<'PY'
import struct, sys
corpus, out, T, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tokens = list(open(corpus, "rb").read()[: B * T + 1])
with open(out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
}

pass() { passed=$((passed + 1)); echo "ok: $1"; }

# wait_step FILE STEP SECONDS: waits until metrics FILE has a step event >= STEP.
wait_step() {
  local i last
  for ((i = 0; i < $3 * 10; i++)); do
    last=$(grep -o '"event":"step","step":[0-9]*' "$1" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
    [[ -n $last && $last -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

# expect_usage_error_filtered FILTER NAME PATTERN CMD...: exit code 2 and exactly one line on
# stderr among those matching FILTER, and that line matches PATTERN.
expect_usage_error_filtered() {
  local filter=$1 name=$2 pattern=$3
  shift 3
  local err rc ours lines
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  ours=$(grep -E -- "$filter" <<<"$err" || true)
  lines=$(printf '%s\n' "$ours" | grep -c . || true)
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -qE -- "$pattern" <<<"$ours"; then
    pass "$name"
  else
    fail "$name (exit $rc, $lines stderr lines, wanted /$pattern/): $err"
  fi
}
# expect_usage_error NAME PATTERN CMD...: every stderr line counts.
expect_usage_error() { expect_usage_error_filtered . "$@"; }
# expect_usage_error_mpi NAME PATTERN CMD...: under mpirun, which adds its own banner after a
# non-zero exit, only our lines ("zerotrain: ...") count.
expect_usage_error_mpi() { expect_usage_error_filtered '^zerotrain: ' "$@"; }

finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
