#!/usr/bin/env bash
# What a GPU-less machine can check of the bf16 kernels' speed (issue 30): the sm_90 SASS that
# nvcc built into libzt_backend.a. Each hot elementwise, norm and classifier kernel of the bf16
# table, and each optimizer's fused step, must move its data 16 bytes at a time (128-bit global loads, LDG.E.128 and its
# variants); each flash attention kernel (cuda_flash_attention.cu, which loads through cp.async
# instead) must run its products on tensor cores (HMMA.16816.F32.BF16: mma.sync m16n8k16 with
# bf16 operands and fp32 accumulation); and no kernel of these objects may spill to local memory
# (cuobjdump -res-usage reports STACK and LOCAL 0, and the SASS has no LDL/STL). A renamed or
# vanished kernel fails too: the lists below are of mangled-name patterns (extended regular
# expressions).
#
# Skipped (77) when the build has no CUDA backend. cuobjdump (with nvdisasm, which it runs for
# SASS) is taken from PATH or the toolkit; a toolkit without them (as the pip-less CUDA images)
# gets NVIDIA's PyPI wheels, pinned, installed once per build directory into $ZT_BIN_DIR/cuda_tools.
# Skipped (77) too, with pip's last line, when they are not there and pip cannot fetch them
# (offline, no pip): the check cannot run, which is not a finding about the kernels. Once the tools
# are there, every failure below is one.
#
# ZT_SASS_KERNELS="object:pattern ..." replaces the 16-byte list (to see the check fail, point it
# at the fp32 table's scalar kernels: "cuda_kernels.cu.o:layernorm_forward_kernel"), and
# ZT_SASS_HMMA_KERNELS the tensor-core list (to see it fail: "cuda_attention.cu.o:attention_forward_kernel").
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

LIB=$ZT_BIN_DIR/src/libzt_backend.a
ARCH=sm_90
CUDA_TOOLS_PINS=(nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37)

DEFAULT_KERNELS=(
  cuda_kernels_bf16.cu.o:'embedding_forward_bf16_kernelILi8E'
  cuda_kernels_bf16.cu.o:'embedding_backward_wpe_bf16_kernelILi8E'
  cuda_kernels_bf16.cu.o:'embedding_backward_wte_bf16_kernelILi8E'
  cuda_kernels_bf16.cu.o:'layernorm_forward_bf16_kernelILi8E'
  cuda_kernels_bf16.cu.o:'layernorm_backward_dx_bf16_kernelILi8E'
  cuda_kernels_bf16.cu.o:'column_partials8_kernel.*LayernormParamTermsBf16'
  cuda_kernels_bf16.cu.o:'column_partials8_kernel.*Bf16MatrixTerms'
  cuda_kernels_bf16.cu.o:'elementwise_kernelILi8E.*Bf16GeluForward'
  cuda_kernels_bf16.cu.o:'elementwise_kernelILi8E.*Bf16GeluBackward'
  cuda_kernels_bf16.cu.o:'elementwise_kernelILi8E.*Bf16Add'
  cuda_kernels_bf16.cu.o:'softmax_xent_forward_bf16_kernelILb0E'
  cuda_kernels_bf16.cu.o:'softmax_xent_forward_bf16_kernelILb1E'
  cuda_kernels_bf16.cu.o:'softmax_xent_backward_bf16_kernel'
  cuda_llama_ops_bf16.cu.o:'rmsnorm_forward_bf16_kernelILi8E'
  cuda_llama_ops_bf16.cu.o:'rmsnorm_backward_dx_bf16_kernelILi8E'
  cuda_llama_ops_bf16.cu.o:'column_partials8_kernel.*RmsnormWeightTermsBf16'
  cuda_llama_ops_bf16.cu.o:'rotary_bf16_kernelILi8E'
  cuda_llama_ops_bf16.cu.o:'elementwise_kernelILi8E.*Bf16SwigluForward'
  cuda_llama_ops_bf16.cu.o:'elementwise_kernelILi8E.*Bf16SwigluBackward'
  cuda_flash_attention.cu.o:'flash_rowdot_kernelILi64E'
  cuda_flash_attention.cu.o:'flash_rowdot_kernelILi128E'
  # The optimizers' fused steps with bf16 gradients and parameters (issue 31): master and moments
  # as float4.
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*AdamOpINS_4bf16ES4_EE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*OneMomentOpINS_4bf16ES4_NS2_8LionRuleE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*OneMomentOpINS_4bf16ES4_NS2_11AdagradRuleE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*LambApplyOpINS_4bf16EE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*MuonMomentumOpINS_4bf16EE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*MuonApplyOpINS_4bf16EE'
  cuda_optimizer_ops.cu.o:'elementwise_kernelILi4E.*AxpbyOp'
)
# Flash attention: forward, and the backward's dQ and dK/dV passes (its D pass is the row dot
# above, no products).
DEFAULT_HMMA_KERNELS=(
  cuda_flash_attention.cu.o:'flash_forward_kernelILi64E'
  cuda_flash_attention.cu.o:'flash_forward_kernelILi128E'
  cuda_flash_attention.cu.o:'flash_backward_dq_kernelILi64E'
  cuda_flash_attention.cu.o:'flash_backward_dq_kernelILi128E'
  cuda_flash_attention.cu.o:'flash_backward_dkdv_kernelILi64E'
  cuda_flash_attention.cu.o:'flash_backward_dkdv_kernelILi128E'
)
if [[ -n ${ZT_SASS_KERNELS:-} ]]; then
  read -r -a KERNELS <<<"$ZT_SASS_KERNELS"
else
  KERNELS=("${DEFAULT_KERNELS[@]}")
fi
if [[ -n ${ZT_SASS_HMMA_KERNELS:-} ]]; then
  read -r -a HMMA_KERNELS <<<"$ZT_SASS_HMMA_KERNELS"
else
  HMMA_KERNELS=("${DEFAULT_HMMA_KERNELS[@]}")
fi

# ---- is there CUDA code at all? -----------------------------------------------------------------
if [[ ! -f $LIB ]]; then
  echo "FAILED: $LIB is missing (build the target zt_backend first)"
  exit 1
fi
if ! ar t "$LIB" | grep -q '\.cu\.o$'; then
  echo "cuda_sass: skipped: this zerotrain was built without the CUDA backend (no .cu objects in $LIB)"
  exit 77
fi

# ---- cuobjdump and nvdisasm ---------------------------------------------------------------------
find_tool() {  # find_tool NAME: PATH, then the toolkit beside nvcc, then our PyPI copy
  local dir
  for dir in "" "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")" /usr/local/cuda/bin \
             "$ZT_BIN_DIR/cuda_tools/nvidia/cu13/bin"; do
    if [[ -z $dir ]]; then
      command -v "$1" 2>/dev/null && return 0
    elif [[ -x $dir/$1 ]]; then
      echo "$dir/$1" && return 0
    fi
  done
  return 1
}
if ! find_tool cuobjdump >/dev/null || ! find_tool nvdisasm >/dev/null; then
  tools=$ZT_BIN_DIR/cuda_tools
  pins=$(printf '%s\n' "${CUDA_TOOLS_PINS[@]}")
  if [[ ! -f $tools/.installed ]] || [[ $(cat "$tools/.installed") != "$pins" ]]; then
    echo "cuda_sass: the toolkit has no cuobjdump/nvdisasm; installing ${CUDA_TOOLS_PINS[*]} from PyPI into $tools"
    rm -rf "$tools"
    pip_out=$(/usr/bin/python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tools" \
                "${CUDA_TOOLS_PINS[@]}" 2>&1)
    pip_rc=$?
    pip_out=$(grep -v "Running pip as the 'root' user" <<<"$pip_out" | grep .)
    if ((pip_rc != 0)); then
      rm -rf "$tools"  # a partial install: the next run tries again
      echo "cuda_sass: skipped: cannot fetch cuobjdump/nvdisasm: $(tail -1 <<<"${pip_out:-pip exit $pip_rc}")"
      exit 77
    fi
    [[ -n $pip_out ]] && echo "$pip_out"
    [[ -x $tools/nvidia/cu13/bin/cuobjdump ]] && printf '%s\n' "$pins" >"$tools/.installed"
  fi
fi
CUOBJDUMP=$(find_tool cuobjdump) || { echo "FAILED: no cuobjdump (PATH, the CUDA toolkit, or PyPI)"; exit 1; }
NVDISASM=$(find_tool nvdisasm) || { echo "FAILED: no nvdisasm, which cuobjdump needs for SASS"; exit 1; }
# cuobjdump runs nvdisasm for -sass and looks for it on PATH (or NVDISASM_PATH).
NVDISASM_PATH=$(dirname "$NVDISASM")
export NVDISASM_PATH PATH=$NVDISASM_PATH:$PATH
echo "cuda_sass: $("$CUOBJDUMP" --version | tail -1) on $LIB ($ARCH)"

# ---- disassemble the objects named --------------------------------------------------------------
# Per object: $WORK/<obj>.funcs, one line per kernel: name ldg128 stg128 ldl stl reg stack local
# hmma (HMMA.16816.F32.BF16 instructions).
objects=$(for k in "${KERNELS[@]}" "${HMMA_KERNELS[@]}"; do echo "${k%%:*}"; done | sort -u)
# shellcheck disable=SC2086 # one word per object
(cd "$WORK" && ar x "$LIB" $objects) || { echo "FAILED: $LIB lacks one of: $objects"; exit 1; }
for obj in $objects; do
  if ! "$CUOBJDUMP" -sass -arch "$ARCH" "$WORK/$obj" >"$WORK/$obj.sass" 2>"$WORK/$obj.err"; then
    echo "FAILED: cuobjdump -sass $obj: $(head -3 "$WORK/$obj.err")"
    exit 1
  fi
  "$CUOBJDUMP" -res-usage -arch "$ARCH" "$WORK/$obj" >"$WORK/$obj.res" 2>>"$WORK/$obj.err"
  if ! grep -q 'Function :' "$WORK/$obj.sass"; then
    echo "FAILED: $obj has no $ARCH code (CMAKE_CUDA_ARCHITECTURES must include 90-real)"
    exit 1
  fi
  awk -v res_file="$WORK/$obj.res" '
    FILENAME == res_file && /^[[:space:]]*Function [^ ]*:$/ { name = $2; sub(/:$/, "", name); next }
    FILENAME == res_file && /REG:/ {
      for (i = 1; i <= NF; i++) { split($i, kv, ":"); res[name, kv[1]] = kv[2] }
      next
    }
    FILENAME == res_file { next }
    /Function :/ { name = $3; names[++n] = name; next }
    name != "" {
      if ($0 ~ /LDG(\.[A-Z0-9_]+)*\.128([ .;]|$)/) ldg[name]++
      if ($0 ~ /STG(\.[A-Z0-9_]+)*\.128([ .;]|$)/) stg[name]++
      if ($0 ~ /[^A-Z]LDL[. ]/) ldl[name]++
      if ($0 ~ /[^A-Z]STL[. ]/) stl[name]++
      if ($0 ~ /HMMA\.16816\.F32\.BF16([ .;]|$)/) hmma[name]++
    }
    END {
      for (i = 1; i <= n; i++) {
        f = names[i]
        print f, ldg[f] + 0, stg[f] + 0, ldl[f] + 0, stl[f] + 0, res[f, "REG"], res[f, "STACK"], res[f, "LOCAL"],
              hmma[f] + 0
      }
    }' "$WORK/$obj.res" "$WORK/$obj.sass" >"$WORK/$obj.funcs"
done

# one_kernel OBJ PATTERN: sets `kernel` to the figures line of the one kernel of OBJ whose name
# matches PATTERN; fails (and returns 1) when none or several do.
one_kernel() {
  local count
  kernel=$(awk -v p="$2" '$1 ~ p' "$WORK/$1.funcs")
  count=$(grep -c . <<<"$kernel")
  if [[ -z $kernel ]]; then
    fail "$1: no kernel matches '$2' (renamed or removed? update tests/integration/cuda_sass.sh)"
    return 1
  fi
  if ((count > 1)); then
    fail "$1: '$2' matches $count kernels; make the pattern name one"
    return 1
  fi
}

# ---- (1) 16-byte loads in each listed kernel ------------------------------------------------------
printf '%-72s %7s %7s %4s %6s\n' "kernel (object: pattern)" "LDG.128" "STG.128" "REG" "spills"
for k in "${KERNELS[@]}"; do
  obj=${k%%:*} pattern=${k#*:}
  one_kernel "$obj" "$pattern" || continue
  read -r name ldg stg ldl stl reg _ <<<"$kernel"
  printf '%-72s %7s %7s %4s %6s\n' "${obj%.cu.o}: $pattern" "$ldg" "$stg" "$reg" "$((ldl + stl))"
  if ((ldg > 0)); then
    pass "$pattern: $ldg 128-bit global loads"
  else
    fail "$pattern ($obj): no 128-bit global load (LDG.E.128) in its $ARCH SASS: not vectorised ($name)"
  fi
done

# ---- (2) tensor cores in each flash attention kernel ----------------------------------------------
printf '%-72s %7s %4s %6s\n' "kernel (object: pattern)" "HMMA" "REG" "spills"
for k in "${HMMA_KERNELS[@]}"; do
  obj=${k%%:*} pattern=${k#*:}
  one_kernel "$obj" "$pattern" || continue
  read -r name _ _ ldl stl reg _ _ hmma <<<"$kernel"
  printf '%-72s %7s %4s %6s\n' "${obj%.cu.o}: $pattern" "$hmma" "$reg" "$((ldl + stl))"
  if ((hmma > 0)); then
    pass "$pattern: $hmma HMMA.16816.F32.BF16 (bf16 tensor-core mma, fp32 accumulation)"
  else
    fail "$pattern ($obj): no HMMA.16816.F32.BF16 in its $ARCH SASS: not on tensor cores ($name)"
  fi
done

# ---- (3) no local memory in any kernel of those objects ------------------------------------------
for obj in $objects; do
  spilling=$(awk '$4 + $5 > 0 || $7 + 0 > 0 || $8 + 0 > 0 {
                    printf "  %s: LDL %d, STL %d, STACK %s, LOCAL %s\n", $1, $4, $5, $7, $8 }' "$WORK/$obj.funcs")
  total=$(grep -c . "$WORK/$obj.funcs")
  if [[ -z $spilling ]]; then
    pass "$obj: none of its $total kernels uses local memory (no spills, STACK 0, LOCAL 0)"
  else
    fail "$obj: kernels with local memory (spills or stack):"$'\n'"$spilling"
  fi
done
finish
