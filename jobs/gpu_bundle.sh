#!/usr/bin/env bash
# Carries a release build to a GPU machine that has the NVIDIA driver and CUDA 13 but none of our
# Debian packages and no network (a lent cloud GPU), so that jobs/gpu_smoke.sh --skip-build runs
# there. `pack` (here, next to the build) writes one archive: the build's test files
# (CTestTestfile.cmake, CMakeCache.txt), the executables the gpu tests and the GPU benchmarks run,
# every shared library they load from Debian (ldd's closure; not glibc, not the driver, not
# cuBLASLt or NCCL, which come from the GPU machine's CUDA), and Open MPI's install tree
# (mpirun, its plugins and help files, which it finds by absolute path). `unpack` (there, in a
# copy of the same checkout) uses the machine's Open MPI 4 where it has one, else puts Debian's
# files where Debian has them, refusing to replace any file already there; puts the build back at its absolute path, and writes an env.sh that points
# the loader at the bundled libraries and at the machine's own cuBLASLt and NCCL.
#
#   jobs/gpu_bundle.sh pack [--build-dir build/release] [--out .gpu_bundle/bundle.tar.xz]
#   jobs/gpu_bundle.sh unpack .gpu_bundle/bundle.tar.xz && source .gpu_bundle/env.sh
#   jobs/gpu_smoke.sh --no-install --skip-build
#
# Exit code: 0 done; 1 something is missing or would be overwritten (one line says which); 2 usage.
set -euo pipefail
say() { echo "gpu_bundle: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit "${1:-2}"; }
root=$(cd "$(dirname "$0")/.." && pwd)

pack() {
  local build_dir=$root/build/release out=$root/.gpu_bundle/bundle.tar.xz
  while (($#)); do
    case $1 in
      --build-dir) build_dir=$(cd "${2:?--build-dir needs a directory}" && pwd); shift 2 ;;
      --out) out=${2:?--out needs a file}; shift 2 ;;
      *) say "pack: unknown argument '$1'"; usage 2 ;;
    esac
  done
  [[ -f $build_dir/CMakeCache.txt ]] || die "$build_dir: no CMakeCache.txt (build the release preset first)"
  grep -q '^ZT_NCCL_LIBRARY:.*nccl' "$build_dir/CMakeCache.txt" || die "$build_dir: built without the CUDA backend"
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN

  # The executables: what `ctest -L gpu` runs from the build, the tools the integration scripts
  # call, and the GPU benchmarks.
  local -a bins
  mapfile -t bins < <(ctest --test-dir "$build_dir" -L gpu --show-only=json-v1 | python3 -c "
import json, sys, os
build = sys.argv[1]
for t in json.load(sys.stdin)['tests']:
    for arg in t.get('command', []):
        if arg.startswith(build + '/') and os.access(arg, os.X_OK):
            print(arg)" "$build_dir" | sort -u)
  bins+=("$build_dir"/src/zerotrain "$build_dir"/tools/zero_* "$build_dir"/tests/bench/bench_gpu_*)
  local f
  for f in "${bins[@]}" $(find "$build_dir" -name CTestTestfile.cmake) "$build_dir/CMakeCache.txt"; do
    [[ -f $f ]] || continue
    mkdir -p "$stage/build/$(dirname "${f#"$build_dir"/}")"
    cp -p "$f" "$stage/build/${f#"$build_dir"/}"
  done

  # Open MPI as Debian installs it (the packages' files, without docs), and mpirun/mpiexec, which
  # Debian's alternatives provide.
  local -a mpi_files
  mapfile -t mpi_files < <(dpkg -L libopenmpi3 openmpi-bin openmpi-common libpmix2 |
    grep -E "^/" | grep -vE "^/usr/share/(doc|man|lintian)/|^/\.$" | while read -r p; do [[ -d $p && ! -L $p ]] || echo "$p"; done)
  tar -C / -cf - "${mpi_files[@]#/}" | tar -C "$stage" --one-top-level=sys -xf -
  ln -sf orterun "$stage/sys/usr/bin/mpirun"
  ln -sf orterun "$stage/sys/usr/bin/mpiexec"

  # The loader's closure of every ELF file in the bundle, less glibc and the driver; libstdc++ and
  # libgcc_s go to lib/compat, used only where the machine's own are older.
  mkdir -p "$stage/lib/compat" "$stage/lib/mpi"
  find "$stage/build" "$stage/sys" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \; |
    xargs -r ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
      case $(basename "$lib") in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | libutil.so* | ld-linux*) ;;
        libcuda.so* | libnvidia*) ;;
        libstdc++.so* | libgcc_s.so*) cp -L "$lib" "$stage/lib/compat/" ;;
        libmpi*.so* | libopen-pal.so* | libopen-rte.so* | liboshmem.so* | libpmix.so*) cp -L "$lib" "$stage/lib/mpi/" ;;
        *) [[ $lib == "$stage"/* ]] || cp -L "$lib" "$stage/lib/" ;;
      esac
    done
  echo "$root $build_dir" >"$stage/paths"
  mkdir -p "$(dirname "$out")"
  # Every executable links the whole engine (~13 MB, mostly the same bytes): a dictionary larger
  # than the archive lets xz store those bytes once (65 MB with -6's 8 MiB window, 42 MB with this),
  # under the device machine's 64 MiB for the working tree and what it carries.
  tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=256MiB >"$out"
  say "wrote $out ($(du -h "$out" | cut -f1); ${#bins[@]} executables, $(find "$stage/lib" -name '*.so*' | wc -l) libraries)"
}

unpack() {
  local archive=${1:?unpack needs the archive}
  local dir
  dir=$(cd "$(dirname "$archive")" && pwd)
  rm -rf "$dir/unpacked"
  mkdir -p "$dir/unpacked"
  xz -dc "$archive" | tar -C "$dir/unpacked" -xf -
  local u=$dir/unpacked old_root old_build
  read -r old_root old_build <"$u/paths"

  # Open MPI 4 (libmpi.so.40): the machine's own where it has one (Ubuntu's is ABI-compatible),
  # else Debian's files at Debian's paths, only where nothing is, so nothing of the machine's changes.
  local path=$u/lib
  if mpiexec --version 2>/dev/null | grep -qE '(OpenRTE|Open MPI)\) 4\.'; then
    say "using the machine's $(mpiexec --version | head -n 1)"
  else
    local clash
    clash=$(cd "$u/sys" && find . ! -type d | while read -r p; do
      if [[ -e /$p || -L /$p ]] && ! cmp -s "$p" "/$p"; then echo "/${p#./}"; fi; done | head -n 3) || true
    [[ -z $clash ]] || die "Open MPI's files would replace the machine's own: $clash (not unpacked)"
    tar -C "$u/sys" -cf - . | tar -C / --skip-old-files -xf -
    path=$path:$u/lib/mpi
  fi

  # The build at its absolute path (CTestTestfile.cmake names it), the checkout at the old root.
  if [[ ! -e $old_root ]]; then
    mkdir -p "$(dirname "$old_root")"
    ln -s "$root" "$old_root"
  fi
  [[ $old_root -ef $root ]] || die "$old_root exists and is not this checkout ($root)"
  mkdir -p "$old_build"
  cp -a "$u/build/." "$old_build/"

  # The machine's cuBLASLt and NCCL (the toolkit's, else a Python wheel's), then our libraries.
  local lib found
  for lib in libcublasLt.so.13 libcublas.so.13 libnccl.so.2; do
    found=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -name "$lib" 2>/dev/null | head -n 1) || true
    [[ -n $found ]] || die "no $lib on this machine (CUDA 13's cuBLAS and NCCL 2 are needed)"
    [[ :$path: == *":$(dirname "$found"):"* ]] || path=$path:$(dirname "$found")
  done
  local sys_cxx
  sys_cxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 /{print $NF}' | head -n 1) || true
  if [[ -z $sys_cxx ]] || ! grep -q GLIBCXX_3.4.30 "$sys_cxx"; then path=$path:$u/lib/compat; fi
  cat >"$dir/env.sh" <<EOF
export LD_LIBRARY_PATH=$path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory between the ranks of one machine, nothing that probes for networks.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
EOF
  say "unpacked to $u; the build is at $old_build; now: source $dir/env.sh"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  unpack) shift; unpack "$@" ;;
  -h | --help) usage 0 ;;
  *) usage 2 ;;
esac
