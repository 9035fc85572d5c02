#!/usr/bin/env bash
# HF tokenizer.json support (issue 16): zero_tokenize's ids and texts against the PyPI tokenizers
# package on tokenizers trained in the test (tokenizer_parity.py), and the refusal, by name, of
# the components zerotrain does not implement.
source "$(dirname "$0")/lib.sh"
install_pylib
TOKENIZE="$ZT_BIN_DIR/tools/zero_tokenize"

PYTHONPATH=$PYLIB timeout 600 /usr/bin/python3 "$ZT_SOURCE_DIR/tests/integration/tokenizer_parity.py" "$TOKENIZE" \
  "$PREPARE" "$WORK" \
  >"$WORK/parity.log" 2>&1
rc=$?
cat "$WORK/parity.log"
[[ $rc -eq 0 ]] && pass "ids and decoded text equal HF tokenizers' (7 styles); zero_prepare_data --tokenizer" ||
  fail "tokenizer parity (exit $rc)"

# A tokenizer.json edited to hold a component we do not implement: one line naming the file, the
# component's place and its type, exit 2.
edit() {  # edit NAME PYTHON-STATEMENT: a copy of the gpt2-style tokenizer, changed
  mkdir -p "$WORK/$1"
  /usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1])); $2; json.dump(t, open(sys.argv[2], 'w'))" \
    "$WORK/gpt2/tokenizer.json" "$WORK/$1/tokenizer.json"
}
printf 'hello\n' >"$WORK/line.txt"
edit wordpiece 't["model"]["type"] = "WordPiece"'
expect_usage_error "WordPiece model refused" 'wordpiece/tokenizer.json: model: model "WordPiece" is not supported' \
  "$TOKENIZE" --tokenizer "$WORK/wordpiece" "$WORK/line.txt"
edit bert 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, {"type": "BertPreTokenizer"}]}'
expect_usage_error "BertPreTokenizer refused" \
  'bert/tokenizer.json: pre_tokenizer.pretokenizers\[1\]: pre-tokenizer "BertPreTokenizer" is not supported' \
  "$TOKENIZE" --tokenizer "$WORK/bert" "$WORK/line.txt"
edit precompiled 't["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled", "precompiled_charsmap": ""}]}'
expect_usage_error "Precompiled normalizer refused" \
  'precompiled/tokenizer.json: normalizer.normalizers\[1\]: normalizer "Precompiled" is not supported' \
  "$TOKENIZE" --tokenizer "$WORK/precompiled" "$WORK/line.txt"
edit badmerge 't["model"]["merges"][3] = "Ġ nosuchtoken"'
expect_usage_error "merge of an unknown token refused" 'badmerge/tokenizer.json: model.merges\[3\]: .*not in the vocab' \
  "$TOKENIZE" --tokenizer "$WORK/badmerge" "$WORK/line.txt"
expect_usage_error "no EOS known" 'gpt2: no eos_token in tokenizer_config.json; name one with --eos_token' \
  bash -c "rm -f '$WORK/gpt2/tokenizer_config.json'; '$PREPARE' '$WORK/line.txt' --tokenizer '$WORK/gpt2' --output_dir '$WORK/p'"
expect_usage_error "--eos_token that is no token" '--eos_token "<nope>" is not a token of' \
  "$PREPARE" "$WORK/line.txt" --tokenizer "$WORK/gpt2" --eos_token "<nope>" --output_dir "$WORK/p"
mkdir -p "$WORK/empty"
expect_usage_error "a folder without tokenizer.json" 'empty: no tokenizer.json' \
  "$TOKENIZE" --tokenizer "$WORK/empty" "$WORK/line.txt"
finish
