#!/usr/bin/env bash
# Installs the Debian packages zerotrain builds and tests with, when they are missing.
# Usage: jobs/install_deps.sh [--with-bench | --check]   (--with-bench adds fio and GNU time)
# Needs root (or sudo) only when something is missing. Safe to run again. --check installs
# nothing: it prints the missing packages on one line and exits 1 if there are any.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-dev zlib1g-dev
  libboost1.81-dev libboost-json1.81-dev libboost-program-options1.81-dev
  libprotobuf-dev protobuf-compiler
  libopenblas-openmp-dev libopenblas0-openmp
  liburing-dev libpcre2-dev libicu-dev libdnnl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # Test side: the suite checks that HF transformers (from PyPI, tests/requirements.txt) loads
  # our export, on Debian's PyTorch; the product itself needs neither.
  python3 python3-pip python3-torch
)
check=0
case ${1:-} in
  "") ;;
  --with-bench) packages+=(fio time) ;;
  --check) check=1 ;;
  -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "install_deps: unknown argument '$1' (--with-bench, --check or --help)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if ((check)); then
  echo "${missing[*]}"
  exit 1
fi

echo "install_deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
