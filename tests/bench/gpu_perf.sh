#!/usr/bin/env bash
# Issue 30's one prepared GPU benchmark: ours against PyTorch on the same GPU in the same call, in
# about 9 minutes on one H100/H200 (the gpu tests alone take 3.5 of them: test_zero_stages_cuda_np2
# ran 205 s on an H100). Each part is selectable, so that a short run can do only some:
#   gpt2       bench_gpu_train, GPT-2 124M, 16 x 1024, bf16; and torch_gpu_train.py, the same model
#              and shape in PyTorch (bf16 autocast, SDPA, fused AdamW, torch.compile)
#   llama      the Llama 3.2 1B shape (16 layers, 2048 wide, 32/8 heads, SwiGLU 8192, vocab 128256,
#              T 2048; lm_head untied, as bench_gpu_train --model llama builds it: 1.50B parameters)
#              at the largest micro-batch that fits: PyTorch's found by torch_gpu_train.py
#              --largest_batch; ours at that batch (or by its own --largest_batch, once it has one),
#              where bench_gpu_train takes --model (else "absent: not supported by this build");
#              ours again as PyTorch lays it out (side "autocast": --dtype fp32 --activation_dtype
#              bf16, fp32 parameters and bf16 activations), and at ZeRO stage 1 (side "zero1":
#              bf16 gradients, DeepSpeed's default for bf16 there: 16 B a parameter, as PyTorch's)
#   attention  causal attention forward+backward, bf16, T 1024/2048/4096, head dims 64 and 128:
#              torch_sdpa_bench.py (PyTorch's SDPA), and ours through bench_gpu_attention if built
#   tests      ctest --test-dir BUILD -L gpu -j 8 --output-on-failure
#   loss       bench_gpu_train --loss_check (bf16 against fp32 loss), where it takes that flag, and
#              torch_gpu_train.py --loss_check (PyTorch's bf16 autocast against its fp32, same test)
#   profile    one zerotrain run with --profile_steps 1 (GPT-2 124M, 3 steps of 16 x 1024, bf16),
#              where zerotrain takes that flag
#   offload    bench_gpu_train on a 5.1B Llama shape with ZeRO-Offload (stage 2, optimizer on the
#              CPU, checkpointing, 16 micro-steps; where the build takes --delayed_param_update,
#              the same run's last steps with it), then bench_gpu_offload (its copies against bare
#              pinned copies)
# A program this build lacks makes its side "absent": reported, not a failure.
#
#   tests/bench/gpu_perf.sh --out DIR [--build-dir DIR] [--parts gpt2,llama,...] [--time-limit S]
#
# On a lent GPU machine, with the build carried by jobs/gpu_bundle.sh:
#   jobs/gpu_bundle.sh unpack .gpu_bundle/bundle.tar.xz && source .gpu_bundle/env.sh
#   ZT_GIT_COMMIT=<sha> tests/bench/gpu_perf.sh --out "$OUT/gpu_perf"
#
# Options:
#   --out DIR          where the logs (DIR/<part>.log) and DIR/summary.json go (required)
#   --build-dir DIR    the build with bench_gpu_* and zerotrain     (default: build/release)
#   --parts LIST       comma-separated parts, run in the order above (default: all of them)
#   --time-limit S     seconds for the whole run (default 580): each side of a part runs under
#                      `timeout` with its own limit, cut to what is left; a side that would start
#                      with under 20 s left is skipped and reported
#
# Writes DIR/summary.json (after every part, so that a stopped run leaves one): the date, the card
# (nvidia-smi's name and driver), the commit (git rev-parse HEAD, else ZT_GIT_COMMIT, else the file
# COMMIT in the checkout), and per part ours and PyTorch's tokens/s (or ms), MFU and peak memory,
# their ratio (our speed / PyTorch's), the status and the issue's targets met or missed. Commit it
# as tests/bench/results/gpu_perf-<date>.json. Prints a short table last (gpu_perf_summary.py).
#
# Exit code: 0 every part that ran passed; 1 a part failed (a program's error, a time limit, a gpu
# test failed or skipped); 2 bad usage; 77 (skipped) where nvidia-smi shows no GPU, after checking
# the arguments. A target missed (say, ours at 0.1x PyTorch) is in the verdict, not a failure.
# Settings (environment):
#   ZT_PYTHON       the python whose torch runs the PyTorch sides (default: python3 if it imports
#                   torch, else /usr/bin/python3)
#   ZT_GIT_COMMIT   the commit, where the checkout has no .git (a copy of the work tree)
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
all_parts=(gpt2 llama attention tests loss profile offload)
out=""
build_dir=$root/build/release
build_dir_given=0
parts_arg=$(IFS=,; echo "${all_parts[*]}")
time_limit=580
min_side=20

say() { echo "gpu_perf: $*" >&2; }
usage_error() { say "$*"; exit 2; }
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
need_value() { [[ -n ${2:-} && ${2:-} != --* ]] || usage_error "$1 needs a value (see --help)"; }
while (($#)); do
  case $1 in
    -h | --help) usage ;;
    --out) need_value "$1" "${2:-}"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; [[ -n $out ]] || usage_error "--out needs a directory"; shift ;;
    --build-dir) need_value "$1" "${2:-}"; build_dir=$2; build_dir_given=1; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; build_dir_given=1; [[ -n $build_dir ]] || usage_error "--build-dir needs a directory"; shift ;;
    --parts) need_value "$1" "${2:-}"; parts_arg=$2; shift 2 ;;
    --parts=*) parts_arg=${1#*=}; shift ;;
    --time-limit) need_value "$1" "${2:-}"; time_limit=$2; shift 2 ;;
    --time-limit=*) time_limit=${1#*=}; shift ;;
    *) usage_error "unknown argument '$1' (--out DIR, --build-dir DIR, --parts LIST, --time-limit S or --help)" ;;
  esac
done
[[ -n $out ]] || usage_error "--out DIR is required (where the logs and summary.json go)"
[[ ! -e $out || -d $out ]] || usage_error "--out $out: exists and is not a directory"
[[ $time_limit =~ ^[1-9][0-9]*$ ]] || usage_error "--time-limit must be a positive number of seconds, got '$time_limit'"
IFS=, read -r -a wanted <<<"$parts_arg"
((${#wanted[@]})) || usage_error "--parts needs at least one of: ${all_parts[*]}"
for p in "${wanted[@]}"; do
  [[ -n $p ]] || usage_error "--parts '$parts_arg': an empty name (known: ${all_parts[*]})"
  [[ " ${all_parts[*]} " == *" $p "* ]] || usage_error "--parts: unknown part '$p' (known: ${all_parts[*]})"
done
parts=()  # the ones asked for, in the order above
for p in "${all_parts[@]}"; do [[ ",$parts_arg," == *",$p,"* ]] && parts+=("$p"); done
if ((build_dir_given)) && [[ ! -d $build_dir ]]; then usage_error "--build-dir $build_dir: no such directory"; fi
[[ $build_dir == /* ]] || build_dir=$PWD/$build_dir
[[ $out == /* ]] || out=$PWD/$out

# ---- the GPU ----
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if ((gpus == 0)); then
  say "no GPU: nvidia-smi $(command -v nvidia-smi >/dev/null && echo "lists none" || echo "is not installed"); nothing run (parts: ${parts[*]})"
  exit 77
fi
cd "$root" || exit 1
mkdir -p "$out" || usage_error "--out $out: cannot create it"
deadline=$((SECONDS + time_limit))
card=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
gpu_index=${CUDA_VISIBLE_DEVICES:-0}
gpu_index=${gpu_index%%,*}
if commit=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
  dirty=$([[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]] && echo 1 || echo 0)
elif [[ -n ${ZT_GIT_COMMIT:-} ]]; then
  commit=$ZT_GIT_COMMIT dirty=0
elif [[ -s $root/COMMIT ]]; then
  commit=$(head -n 1 "$root/COMMIT") dirty=0
else
  commit=unknown dirty=0
fi
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python=${ZT_PYTHON:-}
if [[ -z $python ]]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' 2>/dev/null; then python=$p; break; fi
  done
  python=${python:-python3}  # the PyTorch sides then fail, and their logs say that torch is missing
fi
torch_version=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo "no torch in $python")
summary_python=$(command -v python3 || echo "$python")
bench_dir=$build_dir/tests/bench
train_bin=$bench_dir/bench_gpu_train
home=$root
# shellcheck source=jobs/lib/programs.sh
source "$root/jobs/lib/programs.sh"
echo "# gpu_perf: $card ($gpus GPU(s)); commit $commit$( ((dirty)) && echo " (dirty)"); build $build_dir;" \
  "PyTorch: $python, torch $torch_version; parts: ${parts[*]}; time limit ${time_limit} s; logs in $out"

# ---- running one side of a part ----
# run_side PART SIDE LIMIT [--smi] COMMAND...: runs COMMAND under `timeout` (LIMIT seconds, or what
# the --time-limit leaves) with its output in DIR/PART.log between '#> begin' and '#> end' lines
# (gpu_perf_summary.py's protocol); --smi samples the device memory nvidia-smi sees meanwhile.
# Returns the command's exit code (0 for a side skipped for time).
run_side() {
  local part=$1 side=$2 want=$3 smi=0 log=$out/$1.log left lim cut=0 rc t0 base=0 spid="" samples peak=""
  shift 3
  [[ $1 == --smi ]] && { smi=1; shift; }
  left=$((deadline - SECONDS))
  if ((left < min_side)); then
    echo "#> skipped $side time limit: ${left} s left of --time-limit ${time_limit}" >>"$log"
    printf '   %-8s skipped: %s s left of the --time-limit\n' "$side" "$left"
    return 0
  fi
  lim=$want
  ((left < want)) && { lim=$left; cut=1; }
  echo "#> begin $side ${lim}s: $*" >>"$log"
  printf '   %-8s %s (limit %s s)\n' "$side" "$*" "$lim" | cut -c1-200
  if ((smi)); then
    samples=$(mktemp)
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" 2>/dev/null | head -n 1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" -lms 200 >"$samples" 2>/dev/null &
    spid=$!
  fi
  t0=$SECONDS
  timeout -k 10 "$lim" "$@" >>"$log" 2>&1
  rc=$?
  if [[ -n $spid ]]; then
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    peak=$(grep -E '^[0-9]+$' "$samples" | sort -n | tail -n 1)
    [[ -n $peak && $base =~ ^[0-9]+$ ]] && peak=$(((peak - base) * 1048576)) || peak=""
    rm -f "$samples"
  fi
  echo "#> end $side rc=$rc seconds=$((SECONDS - t0)) limit=$lim cut=$cut smi_peak_bytes=$peak" >>"$log"
  if ((rc != 0)); then
    printf '   %-8s exit %s after %s s; the log'"'"'s last lines:\n' "$side" "$rc" "$((SECONDS - t0))"
    sed -n '/^#> begin '"$side"' /,$p' "$log" | grep -v '^#>' | tail -n 8 | sed 's/^/     | /' | cut -c1-220
  fi
  return "$rc"
}
absent() {  # absent PART SIDE REASON
  echo "#> absent $2 $3" >>"$out/$1.log"
  printf '   %-8s absent: %s\n' "$2" "$3"
}
# help_lists PROGRAM FLAG: whether PROGRAM's --help names FLAG. bench_gpu_train has no --help today
# (Boost answers "unrecognised option '--help'", which names no flag), so this is false until a
# build adds the flag and --help with it.
# knows_flag PROGRAM FLAG: whether PROGRAM takes FLAG. Its --help says so where it has one
# (zerotrain). bench_gpu_train has none (Boost answers "unrecognised option '--help'"): then Boost
# is asked about FLAG itself, with --steps 0 so that a known flag stops at the usage check, before
# any GPU work. Both under a time limit, in case a program ran its benchmark all the same.
knows_flag() {
  local text
  text=$(timeout -k 5 30 "$1" --help 2>&1)
  grep -qE -- "(^|[^a-z_])$2([^a-z_]|$)" <<<"$text" && return 0
  grep -qiE "unrecogni[sz]ed option '--help'" <<<"$text" || return 1
  text=$(timeout -k 5 30 "$1" "$2" --steps 0 2>&1)
  ! grep -qiE "unrecogni[sz]ed option|unknown (option|flag)" <<<"$text"
}
summarize() {  # summarize QUIET: (re)writes DIR/summary.json; its exit code is the verdict
  "$summary_python" "$root/tests/bench/gpu_perf_summary.py" --out "$out" --parts "$(IFS=,; echo "${parts[*]}")" \
    --card "$card" --commit "$commit" --dirty "$dirty" --date "$date_utc" --gpus "$gpus" \
    --python_torch "$python: torch $torch_version" --time_limit "$time_limit" --quiet "$1"
}

gpt2_shape=(--layers 12 --embd 768 --heads 12 --vocab 50257 --block 1024 --batch 16 --dtype bf16)
llama_shape=(--layers 16 --embd 2048 --heads 32 --kv_heads 8 --intermediate 8192 --vocab 128256 --block 2048 --dtype bf16)

part_gpt2() {
  # bench_gpu_train: --target 0, so that its own 160K check does not fail the part (the targets are
  # the summary's); read from it: its 'RESULT tokens_per_s=N step_ms=N mfu=N peak_device_bytes=N
  # target=N' line (an older one without mfu: the '# median step ... MFU X%' line).
  if [[ -x $train_bin ]]; then
    run_side gpt2 ours 120 --smi "$train_bin" "${gpt2_shape[@]}" --steps 10 --target 0
  else
    absent gpt2 ours "no bench_gpu_train in $bench_dir"
  fi
  run_side gpt2 pytorch 210 --smi "$python" tests/bench/torch_gpu_train.py --model gpt2 "${gpt2_shape[@]}" \
    --compile 1 --steps 20 --warmup 3
}

part_llama() {
  # PyTorch first: its largest micro-batch is the one ours runs at, unless ours can search itself.
  # --tie 0 and rope_theta 500000: bench_gpu_train's Llama (untied head, Llama 3's theta).
  run_side llama pytorch 240 --smi "$python" tests/bench/torch_gpu_train.py --model llama "${llama_shape[@]}" \
    --tie 0 --rope_theta 500000 --compile 1 --largest_batch 1 --steps 10 --warmup 3
  local batch
  batch=$(sed -n 's/^RESULT {.*"batch": \([0-9]*\).*/\1/p' "$out/llama.log" | tail -n 1)
  if [[ ! -x $train_bin ]]; then
    absent llama ours "no bench_gpu_train in $bench_dir"
  elif ! knows_flag "$train_bin" --model; then
    absent llama ours "not supported by this build: bench_gpu_train takes no --model"
  else
    local args=(--model llama "${llama_shape[@]}" --steps 10 --target 0)
    if knows_flag "$train_bin" --largest_batch; then
      args+=(--largest_batch 1)
    else
      args+=(--batch "${batch:-1}")
    fi
    run_side llama ours 150 --smi "$train_bin" "${args[@]}"
    # PyTorch's own layout: fp32 parameters (16 B a parameter with AdamW), bf16 activations.
    if knows_flag "$train_bin" --activation_dtype; then
      run_side llama autocast 150 --smi "$train_bin" "${args[@]/bf16/fp32}" --activation_dtype bf16
    fi
    # DeepSpeed's bf16 at ZeRO stage 1 (one GPU): gradients in bf16, the other 2 B a parameter.
    if knows_flag "$train_bin" --stage; then
      run_side llama zero1 150 --smi "$train_bin" "${args[@]}" --stage 1
    fi
  fi
}

part_attention() {
  run_side attention pytorch 90 "$python" tests/bench/torch_sdpa_bench.py --T 1024,2048,4096 --hd 64,128 \
    --heads 64:12,128:16 --tokens 16384
  # Ours: bench_gpu_attention's own defaults are to be these cases; each as a RESULT line (JSON or
  # key=value) with T, hd and fwd_bwd_ms (gpu_perf_summary.py matches them on T and hd).
  if [[ -x $bench_dir/bench_gpu_attention ]]; then
    run_side attention ours 90 "$bench_dir/bench_gpu_attention"
  else
    absent attention ours "no bench_gpu_attention in $bench_dir"
  fi
}

part_tests() {
  if [[ -f $build_dir/CTestTestfile.cmake ]]; then
    # -j 10: 205 s on an H100 (2026-11-26; the longest test, test_zero_stages_cuda_np2, is most of it);
    # PROCESSORS keeps the MPI tests in bounds.
    run_side tests ours 240 ctest --test-dir "$build_dir" -L gpu -j 10 --output-on-failure --no-tests=error
  else
    absent tests ours "no CTestTestfile.cmake in $build_dir"
  fi
}

part_loss() {
  if [[ ! -x $train_bin ]]; then
    absent loss ours "no bench_gpu_train in $bench_dir"
  elif knows_flag "$train_bin" --loss_check; then
    # GPT-2 124M at a quarter of the batch: 50 steps of the bf16 model and 50 of fp32, and
    # PyTorch's own bf16 autocast against its fp32 on the same test: how far rounding alone moves it.
    run_side loss pytorch 120 "$python" tests/bench/torch_gpu_train.py --model gpt2 --layers 12 --embd 768 \
      --heads 12 --vocab 50257 --block 1024 --batch 4 --loss_check 50
    run_side loss ours 120 "$train_bin" --layers 12 --embd 768 --heads 12 --vocab 50257 --block 1024 --batch 4 \
      --dtype bf16 --loss_check 50
  else
    absent loss ours "bench_gpu_train takes no --loss_check (the bf16-vs-fp32 loss check is not built yet)"
  fi
}

part_profile() {
  local zerotrain prepare
  if ! zerotrain=$(ZT_BIN=$build_dir zt_program zerotrain); then
    absent profile ours "no zerotrain under $build_dir"
  elif ! knows_flag "$zerotrain" --profile_steps; then
    absent profile ours "zerotrain --help lists no --profile_steps"
  elif ! prepare=$(ZT_BIN=$build_dir zt_program zero_prepare_data); then
    absent profile ours "no zero_prepare_data under $build_dir (the run's tokens)"
  else
    run_side profile prepare 60 "$prepare" share/data/tinyshakespeare.txt --output_dir "$out/profile_data" \
      --val_fraction 0.1 --overwrite || return
    run_side profile ours 120 "$zerotrain" --deepspeed configs/zero0.json \
      --config_name configs/models/gpt2-124M.json --train_data "$out/profile_data/train_*.bin" \
      --output_dir "$out/profile_run" --overwrite_output_dir --max_steps 3 --per_device_train_batch_size 16 \
      --block_size 1024 --bf16 --accelerator cuda --save_strategy no --disable_tqdm --profile_steps 1
  fi
}

part_offload() {
  # ZeRO-Offload's headline: a Llama shape of 5.1B parameters (24 layers of Llama 2 7B's width;
  # its fp32 master, moments and gradients, ~82 GB, fit the machine's 128 GiB of host memory,
  # 7B's ~108 GB would not) at stage 2, the optimizer on the CPU, activation checkpointing and
  # 16 micro-steps of 2 x 2048 tokens (65,536 tokens a step, a usual global batch for a model of
  # this size: the CPU's Adam over 5.1B parameters, about a second, is paid once per step): its
  # tokens/s and MFU (target: 40 %). Then the copies alone.
  if [[ ! -x $train_bin ]]; then
    absent offload ours "no bench_gpu_train in $bench_dir"
  elif ! knows_flag "$train_bin" --offload_optimizer; then
    absent offload ours "not supported by this build: bench_gpu_train takes no --offload_optimizer"
  else
    # Where the build has it, the same run goes on with the delayed parameter update (zerotrain's
    # --delayed_param_update): steps 1-2 undelayed, 3 the first delayed, 4-5 timed delayed.
    local steps=(--steps 2)
    knows_flag "$train_bin" --delayed_param_update && steps=(--steps 5 --delayed_param_update 3)
    run_side offload ours 300 --smi "$train_bin" --model llama --layers 24 --embd 4096 --heads 32 --kv_heads 32 \
      --intermediate 11008 --vocab 32000 --block 2048 --batch 2 --accumulation 16 --dtype bf16 --stage 2 \
      --offload_optimizer cpu --gradient_checkpointing --target 0 "${steps[@]}"
  fi
  if [[ -x $bench_dir/bench_gpu_offload ]]; then
    run_side offload copies 60 "$bench_dir/bench_gpu_offload"
  else
    absent offload copies "no bench_gpu_offload in $bench_dir"
  fi
}

for part in "${parts[@]}"; do
  : >"$out/$part.log"
  echo "#> part $part" >>"$out/$part.log"
  printf '\n== %s (%s s left)\n' "$part" "$((deadline - SECONDS))"
  case $part in
    gpt2) part_gpt2 ;;
    llama) part_llama ;;
    attention) part_attention ;;
    tests) part_tests ;;
    loss) part_loss ;;
    profile) part_profile ;;
    offload) part_offload ;;
  esac
  summarize 1 >/dev/null
done

summarize 0
rc=$?
echo "summary: $out/summary.json (commit it as tests/bench/results/gpu_perf-${date_utc%%T*}.json); logs: $out/<part>.log"
case $rc in
  0 | 1) exit "$rc" ;;
  *) say "gpu_perf_summary.py failed (exit $rc)"; exit 1 ;;
esac
