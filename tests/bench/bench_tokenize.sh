#!/usr/bin/env bash
# Tokenization throughput side by side (issue 16): zero_prepare_data --tokenizer against the PyPI
# `tokenizers` package (tests/requirements.txt's pin) on the same corpus, tokenizer and thread
# count, in one run. Target: our tokens/s >= 1.0x theirs at every thread count, end to end (our
# process: reading the JSONL, encoding, writing the shard) against their encode_batch alone; the
# shard must hold exactly their ids (+ EOS per document).
#
# The corpus (bench_tokenize.py build): tinyshakespeare repeated and perturbed to ZT_BENCH_MB MiB
# (default 32) with Unicode-rich lines, in 2-8 KB JSONL documents; byte-level BPEs of vocab 16,000
# trained on it with the `tokenizers` trainer, Llama 3 style (split regex + ByteLevel, a BOS) and
# GPT-2 style (ByteLevel's regex). Repetition helps the word caches on both sides.
#
# Settings: ZT_BENCH_THREADS (default: nproc; 1 is measured too), ZT_BENCH_MB (32),
# ZT_BENCH_STYLES ("llama3 gpt2"), BUILD (default build/release).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/lib.sh
threads=${ZT_BENCH_THREADS:-$(nproc)}
megabytes=${ZT_BENCH_MB:-32}
read -r -a styles <<<"${ZT_BENCH_STYLES:-llama3 gpt2}"
build=${BUILD:-build/release}
./jobs/install_deps.sh --with-bench
cmake --preset release >/dev/null
cmake --build --preset release -j "$threads" --target zero_prepare_data >/dev/null
pylib=$(install_bench_pylib "$build")
work=$(mktemp -d /tmp/zt_bench_tokenize.XXXXXX)
trap 'rm -rf "$work"' EXIT
py() { PYTHONPATH=$pylib /usr/bin/python3 tests/bench/bench_tokenize.py "$@"; }
print_machine
py build "$work" --mb "$megabytes" --style "${styles[@]}"

counts=("$threads")
[[ $threads -ne 1 ]] && counts+=(1)
results=()
for style in "${styles[@]}"; do
  for n in "${counts[@]}"; do
    # Theirs: encode_batch on rayon's pool of n threads (the first run also saves the ids).
    ids=()
    [[ $n == "${counts[0]}" ]] && ids=(--write "$work/$style.ids")
    hf=$(RAYON_NUM_THREADS=$n TOKENIZERS_PARALLELISM=true py hf "$work" "$style" "${ids[@]}" | tee >(cat >&2))
    # Ours: the whole process, and the encoding alone (its log line).
    rm -rf "$work/out"
    start=$EPOCHREALTIME
    log=$(OMP_NUM_THREADS=$n "$build/tools/zero_prepare_data" "$work/corpus.jsonl" --tokenizer "$work/$style" \
      --output_dir "$work/out" --val_fraction 0 --disable_tqdm 2>&1 | tee >(cat >&2))
    end=$EPOCHREALTIME
    encode=$(sed -n 's/.* tokens in \([0-9.e+-]*\) s on .*/\1/p' <<<"$log")
    check=$(py check "$work/$style.ids" "$work/out/train_000000.bin")
    results+=("style=$style threads=$n $(grep '^RESULT' <<<"$hf") ours_start=$start ours_end=$end \
ours_encode=$encode ${check#RESULT }")
  done
done
/usr/bin/python3 - "${results[@]}" <<'PY'
import re, sys
def field(text, key): return re.search(r"\b" + key + r"=(\S+)", text).group(1)
print()
print(f"{'style':8s}{'threads':>8s}{'tokens':>11s}{'HF encode_batch':>17s}{'ours encode':>13s}{'ours e2e':>11s}"
      f"{'encode ratio':>14s}{'e2e ratio':>11s}   (tokens/s; ratio = ours / HF)")
ids_ok = speed_ok = True
for r in sys.argv[1:]:
    tokens, check = int(field(r, "tokens")), int(field(r, "check_tokens"))
    hf = tokens / float(field(r, "hf_seconds"))
    enc, e2e = (tokens / float(field(r, "ours_encode")),
                tokens / (float(field(r, "ours_end")) - float(field(r, "ours_start"))))
    print(f"{field(r, 'style'):8s}{field(r, 'threads'):>8s}{tokens:11d}{hf / 1e6:16.2f}M{enc / 1e6:12.2f}M"
          f"{e2e / 1e6:10.2f}M{enc / hf:14.2f}{e2e / hf:11.2f}")
    ids_ok = ids_ok and check == tokens
    speed_ok = speed_ok and e2e / hf >= 1.0
print(f"ids: every shard equals HF's ids + EOS, token for token: {'yes' if ids_ok else 'NO'}")
print(f"target: end-to-end ratio >= 1.00 at every thread count: {'met' if speed_ok else 'MISSED'}")
print("OK" if ids_ok and speed_ok else "FAILED")
sys.exit(0 if ids_ok and speed_ok else 1)
PY
