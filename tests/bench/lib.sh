# shellcheck shell=bash
# Shared by the side-by-side benchmark scripts: what machine the numbers come from, and the
# PyPI peers of tests/requirements.txt (installed as the integration tests install them).

# print_machine: the CPU model, the cores and threads in use, and the ISA extensions our kernels
# and the peers' dispatch on (a ratio measured on one ISA need not hold on another).
print_machine() {
  local model flags
  model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  has() { [[ " $flags " == *" $1 "* ]] && echo yes || echo no; }
  echo "# machine: $model; $(nproc) cores available; avx2 $(has avx2), avx512f $(has avx512f)," \
    "avx512_bf16 $(has avx512_bf16), amx_bf16 $(has amx_bf16); load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# install_bench_pylib BUILD: tests/requirements.txt's pins in BUILD/pylib (tests/integration/lib.sh's
# install_pylib, reused); echoes the folder.
install_bench_pylib() {
  (
    export ZT_BIN_DIR ZT_SOURCE_DIR=$PWD
    ZT_BIN_DIR=$(realpath "$1")
    # shellcheck source=tests/integration/lib.sh
    source tests/integration/lib.sh >/dev/null
    install_pylib >&2
    echo "$PYLIB"
  )
}
