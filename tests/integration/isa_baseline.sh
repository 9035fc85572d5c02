#!/usr/bin/env bash
# The shipped binaries must run on any x86-64 with AVX2: AVX-512 instructions (zmm registers,
# opmask registers, ymm/xmm16-31) may appear only in the functions compiled for AVX-512 and
# chosen at run time, whose names carry "avx512".
source "$(dirname "$0")/lib.sh"
command -v objdump >/dev/null || { echo "objdump (binutils) is required"; exit 1; }
for bin in "$ZEROTRAIN" "$PREPARE"; do
  leaks=$(objdump -d --no-show-raw-insn "$bin" | c++filt |
    awk '/^[0-9a-f]+ <.*>:$/ {fn=$0; next}
         /%zmm|%k[1-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])/ { if (fn !~ /avx512/) print fn }' | sort -u)
  if [[ -z "$leaks" ]]; then
    pass "$(basename "$bin"): AVX-512 only inside avx512 functions"
  else
    fail "$(basename "$bin"): AVX-512 instructions in baseline functions: $(head -5 <<<"$leaks")"
  fi
done
finish
