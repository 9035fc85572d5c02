#!/usr/bin/env bash
# --version (issue 29): every program prints its name and the version, then the build, one
# "key: value" a line; the facts are checked against what this machine says independently (git
# for the commit, mpirun and dpkg for the libraries' versions, CMake for CUDA), and ZT_CPU_ISA=avx2
# shows in cpu_isa_active. A short run's metrics.jsonl start event and its checkpoint's manifest
# carry the same build, and zero_to_fp32 still reads that checkpoint.
source "$(dirname "$0")/lib.sh"
: "${ZT_EXPECT_VERSION:?set by ctest}"

keys="version git_commit build_type compiler cpu_isa cpu_isa_active blas bf16_gemm mpi hdf5 boost protobuf cuda nccl"
commit=unknown
if git -C "$ZT_SOURCE_DIR" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(git -C "$ZT_SOURCE_DIR" rev-parse HEAD)
  [[ -n $(git -C "$ZT_SOURCE_DIR" status --porcelain --untracked-files=no) ]] && commit+=-dirty
fi
upstream() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/[+~-].*//'; }
mpi_version=$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -1)
if [[ ${ZT_EXPECT_CUDA:-OFF} == ON ]]; then
  cuda_re="^cuda: CUDA [0-9.]+, architectures ${ZT_EXPECT_CUDA_ARCHS}$"
  nccl_re="^nccl: NCCL [0-9]+\.[0-9]+\.[0-9]+ \(libnccl\.so\.[0-9]+, loaded at first use\)$"
else
  cuda_re="^cuda: not built$"
  nccl_re="^nccl: not built$"
fi

for path in "$ZT_BIN_DIR/src/zerotrain" "$ZT_BIN_DIR"/tools/zero_{prepare_data,to_fp32,estimate,tokenize,generate,aio_tune}; do
  name=${path##*/}
  text=$("$path" --version 2>&1)
  rc=$?
  got=$(sed -n '2,$s/:.*//p' <<<"$text" | tr '\n' ' ')
  value() { sed -n "s/^$1: //p" <<<"$text"; }
  problems=""
  [[ $rc -eq 0 ]] || problems+=" exit $rc;"
  [[ $(head -1 <<<"$text") == "$name $ZT_EXPECT_VERSION" ]] || problems+=" first line '$(head -1 <<<"$text")';"
  [[ $got == "$keys " ]] || problems+=" keys '$got';"
  [[ $(value version) == "$ZT_EXPECT_VERSION" ]] || problems+=" version;"
  [[ $(value git_commit) == "$commit" ]] || problems+=" git_commit $(value git_commit), git says $commit;"
  [[ $(value mpi) == "Open MPI $mpi_version "* ]] || problems+=" mpi '$(value mpi)', mpirun says $mpi_version;"
  [[ $(value hdf5) == "HDF5 $(upstream libhdf5-dev)" ]] || problems+=" hdf5 '$(value hdf5)';"
  [[ $(value blas) == "OpenBLAS $(upstream libopenblas-openmp-dev) (OpenMP build)" ]] || problems+=" blas '$(value blas)';"
  [[ $(value bf16_gemm) == "oneDNN $(upstream libdnnl-dev)" ]] || problems+=" bf16_gemm '$(value bf16_gemm)';"
  [[ $(value boost) == "Boost $(upstream libboost1.81-dev)" ]] || problems+=" boost '$(value boost)';"
  [[ $(value protobuf) == "Protocol Buffers $(upstream libprotobuf-dev)" ]] || problems+=" protobuf '$(value protobuf)';"
  grep -qE "$cuda_re" <<<"$text" || problems+=" cuda '$(value cuda)';"
  grep -qE "$nccl_re" <<<"$text" || problems+=" nccl '$(value nccl)';"
  [[ $(ZT_CPU_ISA=avx2 "$path" --version | sed -n 's/^cpu_isa_active: //p') == avx2 ]] || problems+=" ZT_CPU_ISA=avx2 not shown;"
  if [[ -z $problems ]]; then pass "$name --version: $ZT_EXPECT_VERSION, $commit, every library's version"; else fail "$name --version:$problems"; fi
  help=$("$path" --help 2>&1)
  grep -q -- "--version" <<<"$help" || fail "$name --help does not list --version"
done

# The same build in the start event and the manifest, as --version prints it.
"$PREPARE" "$ZT_SOURCE_DIR/share/data/tinyshakespeare.txt" --output_dir "$WORK/data" --val_fraction 0.1 2>/dev/null
"$ZEROTRAIN" --deepspeed "$ZT_SOURCE_DIR/configs/zero1.json" --config_name "$ZT_SOURCE_DIR/configs/models/gpt2-demo.json" \
  --train_data "$WORK/data/train_*.bin" --output_dir "$WORK/run" --block_size 64 --per_device_train_batch_size 2 \
  --max_steps 2 --disable_tqdm 2>"$WORK/run.log" || fail "the 2-step run: $(tail -2 "$WORK/run.log")"
"$ZEROTRAIN" --version >"$WORK/version.txt"
/usr/bin/python3 - "$WORK/version.txt" "$WORK/run/metrics.jsonl" "$WORK/run/global_step2/manifest.json" <<'PY' &&
import json, sys
lines = open(sys.argv[1]).read().splitlines()[1:]
want = dict(line.split(": ", 1) for line in lines)
start = json.loads(open(sys.argv[2]).readline())
assert start["event"] == "start", start["event"]
assert start["build"] == want, (start["build"], want)
manifest = json.load(open(sys.argv[3]))
assert manifest["build"] == want, (manifest["build"], want)
PY
  pass "metrics.jsonl's start event and the manifest carry the build --version prints" ||
  fail "build in the start event or the manifest"
if "$ZT_BIN_DIR/tools/zero_to_fp32" "$WORK/run" "$WORK/hf" >"$WORK/export.log" 2>&1 && [[ -s $WORK/hf/model.safetensors ]]; then
  pass "zero_to_fp32 reads a manifest with its build"
else
  fail "zero_to_fp32 on the checkpoint: $(tail -2 "$WORK/export.log")"
fi
finish
