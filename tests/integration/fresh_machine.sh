#!/usr/bin/env bash
# A new user's first steps on a bare Debian 12 machine (issue 29), in roots made from Debian's
# packages alone (mmdebstrap --variant=minbase bookworm: apt and coreutils, no compiler, nothing
# of ours):
#  root A, a developer's machine: the checkout copied in; jobs/install_deps.sh, then
#    jobs/quickstart.sh (configure, build, a 5-step demo); every program's --help and --version;
#    cmake --install into a prefix and cpack's .deb; the prefix moved elsewhere, the checkout
#    moved away, and the demo and consolidate.sh run again from the moved prefix alone; every
#    shared library the installed programs load comes from a package install_deps.sh names
#    (fresh_libraries.sh);
#  root B, a cluster node an admin installs: apt-get install ./zerotrain_*.deb brings no build
#    tools, and the demo runs from /usr/share/zerotrain/jobs/quickstart.sh.
# Needs root and Debian's package mirror, as install_deps.sh does. The bare root is kept as a
# tar in $ZT_FRESH_CACHE (default /var/cache/zerotrain-fresh) for 7 days, exactly as mmdebstrap
# made it: install_deps.sh runs in every test, so a package it fails to name always fails here.
# Each step's seconds are printed (the README quotes them).
source "$(dirname "$0")/lib.sh"

if [[ $(id -u) -ne 0 ]]; then
  echo "fresh_machine: skipped: making and entering a Debian root needs root"
  exit 77
fi
cache=${ZT_FRESH_CACHE:-/var/cache/zerotrain-fresh}
mirror=${ZT_FRESH_MIRROR:-http://deb.debian.org/debian}
security=${ZT_FRESH_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
bare=$cache/bookworm-minbase.tar
# The roots hold a build each (about 3 GB): not under /tmp's default if that is small.
ROOTS=$(mktemp -d "${ZT_FRESH_WORK:-/var/tmp}/zt_fresh.XXXXXX")
trap 'rm -rf "$WORK" "$ROOTS"' EXIT
commit=$(git -C "$ZT_SOURCE_DIR" rev-parse HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$ZT_SOURCE_DIR" status --porcelain --untracked-files=no 2>/dev/null) ]] && commit+=-dirty

# step NAME CMD...: runs CMD with its output in $WORK/NAME.log and prints its seconds; returns
# CMD's status, after printing the log's tail when it failed.
step() {
  local name=$1 start=$SECONDS rc
  shift
  "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  echo "time: $name $((SECONDS - start)) s (exit $rc)"
  ((rc == 0)) || tail -n 25 "$WORK/$name.log"
  return $rc
}

# in_root ROOT CMD...: CMD inside ROOT with a clean environment and /proc, /sys, /dev and a
# /dev/shm of its own, in new mount and PID namespaces: the mounts vanish with it, and so does
# every process it left (mpirun's daemons).
in_root() {
  local root=$1
  shift
  unshare --mount --pid --fork --kill-child -- bash -euc '
    r=$1; shift
    mount --make-rprivate /
    mount --rbind /dev "$r/dev"
    mount -t tmpfs -o size=4g shm "$r/dev/shm"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    exec chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb ZT_GIT_COMMIT="$ZT_GIT_COMMIT" \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"' _ "$root" "$@"
}
export ZT_GIT_COMMIT=$commit  # the copied tree has no .git: the build takes the commit from here

# new_root NAME: a fresh copy of the bare root at $ROOTS/NAME, with the host's resolver.
new_root() {
  mkdir -p "$ROOTS/$1" && tar -C "$ROOTS/$1" -xf "$bare" && cp -L /etc/resolv.conf "$ROOTS/$1/etc/resolv.conf"
}

make_bare() {
  command -v mmdebstrap >/dev/null || "$ZT_SOURCE_DIR/jobs/install_deps.sh" --with-tests || return 1
  mkdir -p "$cache"
  # mmdebstrap writes a tar when the name ends in .tar; renamed only once complete.
  mmdebstrap --variant=minbase --quiet bookworm "$cache/partial.tar" "deb $mirror bookworm main" \
    "deb $mirror bookworm-updates main" "deb $security bookworm-security main" && mv "$cache/partial.tar" "$bare"
}
if [[ -f $bare && -n $(find "$bare" -mtime -7) ]]; then
  echo "time: mmdebstrap 0 s (the cached bare root of $(date -r "$bare" +%F))"
else
  step mmdebstrap make_bare || { fail "mmdebstrap: no bare Debian 12 root"; finish; exit 1; }
fi

# ---- root A: the README's commands, as a developer ----
A=$ROOTS/a
new_root a || { fail "unpacking the bare root"; finish; exit 1; }
mkdir -p "$A/root/zerotrain"
# The checkout as a clone would have it (tracked and untracked-but-not-ignored files; no build/).
(cd "$ZT_SOURCE_DIR" && git ls-files -z --cached --others --exclude-standard |
   tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$A/root/zerotrain" -xf -
if in_root "$A" sh -c 'command -v cc || command -v c++ || command -v cmake || command -v mpirun'; then
  fail "the bare root already has a compiler, cmake or mpirun"
fi

if step install_deps in_root "$A" /root/zerotrain/jobs/install_deps.sh; then
  pass "jobs/install_deps.sh on a bare Debian 12 root"
else
  fail "jobs/install_deps.sh on a bare root"; finish; exit 1
fi
if step quickstart in_root "$A" env ZT_STEPS=5 ZT_OUT=/root/out /root/zerotrain/jobs/quickstart.sh &&
   [[ $(cat "$A/root/out/quickstart/latest" 2>/dev/null) == global_step5 ]] &&
   tail -n 1 "$A/root/out/quickstart/metrics.jsonl" | grep -q '"event":"end"' &&
   ! grep -E ': line [0-9]+: ' "$WORK/quickstart.log"; then
  pass "jobs/quickstart.sh: configure, build, 5 demo steps, checkpoint global_step5, no stray shell error"
else
  fail "jobs/quickstart.sh on the bare root after install_deps.sh"; finish; exit 1
fi

programs=(zerotrain zero_prepare_data zero_to_fp32 zero_estimate zero_tokenize zero_generate zero_aio_tune)
# check_programs ROOT PATH...: each program answers --help (listing --version) and --version
# (its name, then the build, naming this commit); prints what did not.
check_programs() {
  local root=$1 path p bad=""
  shift
  for path in "$@"; do
    p=${path##*/}
    in_root "$root" "$path" --help >"$WORK/help.log" 2>&1 && grep -q -- "--version" "$WORK/help.log" ||
      bad+=" $p --help: $(head -c 200 "$WORK/help.log");"
    in_root "$root" "$path" --version >"$WORK/version.log" 2>&1 &&
      [[ $(head -1 "$WORK/version.log") == "$p "[0-9]* ]] && grep -qx "git_commit: $commit" "$WORK/version.log" ||
      bad+=" $p --version: $(tr '\n' ' ' <"$WORK/version.log" | head -c 200);"
  done
  [[ -z $bad ]] || { echo "$bad"; return 1; }
}
tools=("${programs[@]:1}")
built=(/root/zerotrain/build/release/src/zerotrain "${tools[@]/#//root/zerotrain/build/release/tools/}")
if bad=$(check_programs "$A" "${built[@]}"); then
  pass "every program of the build answers --help and --version (git_commit $commit)"
else
  fail "the build's programs:$bad"
fi

if step install in_root "$A" cmake --install /root/zerotrain/build/release --prefix /opt/zerotrain &&
   step cpack in_root "$A" sh -c 'cd /root/zerotrain/build/release && cpack -G DEB' &&
   deb=$(ls "$A"/root/zerotrain/build/release/zerotrain_*_amd64.deb 2>/dev/null | head -1) && [[ -n $deb ]]; then
  pass "cmake --install to a prefix, and cpack's $(basename "$deb")"
else
  fail "cmake --install / cpack -G DEB"; finish; exit 1
fi
# Relocatable: the prefix copied elsewhere, the checkout gone, nothing on PATH.
mv "$A/opt/zerotrain" "$A/srv/zt-moved" && mv "$A/root/zerotrain" "$A/root/zerotrain.away"
if bad=$(check_programs "$A" "${programs[@]/#//srv/zt-moved/bin/}"); then
  pass "every program in the moved prefix answers --help and --version"
else
  fail "the programs of the moved prefix:$bad"
fi
mkdir -p "$A/root/run"
if step prefix_demo in_root "$A" sh -c 'cd /root/run && ZT_STEPS=3 /srv/zt-moved/share/zerotrain/jobs/quickstart.sh' &&
   [[ $(cat "$A/root/run/out/quickstart/latest" 2>/dev/null) == global_step3 ]] &&
   step prefix_consolidate in_root "$A" sh -c 'cd /root/run && ZT_OUTPUT_DIR=out/quickstart /srv/zt-moved/share/zerotrain/jobs/consolidate.sh' &&
   [[ -s $A/root/run/out/quickstart/hf/model.safetensors ]]; then
  pass "from the moved prefix alone: the demo trains 3 steps into ./out, consolidate.sh exports it"
else
  fail "the demo or consolidate.sh from the moved prefix"
fi
cp "$ZT_SOURCE_DIR/tests/integration/fresh_libraries.sh" "$A/root/fresh_libraries.sh"
if step libraries in_root "$A" bash /root/fresh_libraries.sh /srv/zt-moved; then
  pass "every library the programs load is from a package install_deps.sh names ($(grep -c '^lib ' "$WORK/libraries.log") libraries)"
else
  fail "libraries from packages install_deps.sh does not name"
fi
mv "$A/root/zerotrain.away" "$A/root/zerotrain"

# ---- root B: the .deb, as a cluster admin installs it ----
B=$ROOTS/b
new_root b || { fail "unpacking the bare root"; finish; exit 1; }
cp "$deb" "$B/root/"
if step deb_install in_root "$B" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends /root/zerotrain_*.deb'; then
  pass "apt-get install ./$(basename "$deb") on a second bare root"
else
  fail "apt-get install of the .deb"; finish; exit 1
fi
if in_root "$B" sh -c 'command -v cc || command -v c++ || command -v cmake || dpkg -l build-essential 2>/dev/null | grep -q ^ii' >/dev/null; then
  fail "the .deb brought build tools"
else
  pass "the .deb brings no compiler and no cmake"
fi
depends=$(in_root "$B" dpkg-query -W -f='${Depends}' zerotrain)
want=$(in_root "$A" /srv/zt-moved/share/zerotrain/jobs/install_deps.sh --list runtime | paste -sd, | sed 's/,/, /g')
if [[ $depends == "$want" ]]; then pass "the .deb depends on install_deps.sh's runtime list"; else fail "Depends: '$depends', want '$want'"; fi
mkdir -p "$B/root/run"
if step deb_demo in_root "$B" sh -c 'cd /root/run && ZT_STEPS=3 /usr/share/zerotrain/jobs/quickstart.sh' &&
   [[ $(cat "$B/root/run/out/quickstart/latest" 2>/dev/null) == global_step3 ]] &&
   in_root "$B" zerotrain --version | grep -qx "git_commit: $commit"; then
  pass "from the .deb: the demo trains 3 steps; zerotrain --version names $commit"
else
  fail "the demo from the .deb"
fi
finish
