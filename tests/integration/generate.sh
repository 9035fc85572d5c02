#!/usr/bin/env bash
# zero_generate against HF generate (issue 16): see generate.py.
source "$(dirname "$0")/lib.sh"
install_pylib
out=$(PYTHONPATH=$PYLIB /usr/bin/python3 "$ZT_SOURCE_DIR/tests/integration/generate.py" "$ZT_BIN_DIR/tools/zero_generate" \
  "$WORK" 2>"$WORK/generate.log")
code=$?
echo "$out"
passed=$((passed + $(grep -c '^ok: ' <<<"$out")))
failed=$((failed + $(grep -c '^FAILED: ' <<<"$out")))
[[ $code -eq 0 ]] || [[ $failed -gt 0 ]] || fail "generate.py exited $code: $(tail -3 "$WORK/generate.log")"
[[ $passed -eq 65 ]] || fail "expected 65 checks (6 per model, 13 more for Llama and GPT-2, 4 bad inputs, 9 of \
memory, 2 of checkpoints), $passed passed"
finish
