# Shared helpers for the integration scripts: counters, the expect_* checks, a closing line.
set -uo pipefail
: "${ZT_BIN_DIR:?set by ctest}" "${ZT_SOURCE_DIR:?set by ctest}"
ZEROTRAIN="$ZT_BIN_DIR/src/zerotrain"
PREPARE="$ZT_BIN_DIR/tools/zero_prepare_data"
WORK=$(mktemp -d /tmp/zt_it.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

# expect_usage_error NAME PATTERN CMD...: exit code 2, exactly one line on stderr, matching PATTERN.
expect_usage_error() {
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c . || true)
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -qE -- "$pattern" <<<"$err"; then
    pass "$name"
  else
    fail "$name (exit $rc, $lines stderr lines, wanted /$pattern/): $err"
  fi
}

# expect_usage_error_mpi NAME PATTERN CMD...: the same under mpirun, which adds its own banner
# after a non-zero exit: exactly one line of ours ("zerotrain: ..."), exit 2.
expect_usage_error_mpi() {
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  local ours
  ours=$(grep -E '^zerotrain: ' <<<"$err" || true)
  local lines
  lines=$(printf '%s\n' "$ours" | grep -c . || true)
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -qE -- "$pattern" <<<"$ours"; then
    pass "$name"
  else
    fail "$name (exit $rc, $lines zerotrain lines, wanted /$pattern/): $ours"
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
