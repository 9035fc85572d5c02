#!/usr/bin/env bash
# A real Slurm cluster on this machine for the `slurm` tests: Debian's slurmctld, slurmd and
# munge, started by hand (no systemd, no cgroups, no accounting).
#
#   ctest/local_slurm.sh up [NODES]   install what is missing, write slurm.conf, start the daemons,
#                                     wait until every node is idle (NODES: 1, or N simulated nodes)
#   ctest/local_slurm.sh down         cancel every job, stop the daemons this script started
#
# With N > 1 the nodes are node1..nodeN: N slurmd on this host, each in its own UTS and mount
# namespace (its own hostname, /dev/shm, TmpFS and $ZT_SLURM_NODE_LOCAL, the node-local disk);
# everything else (the work tree, /tmp) is shared as over NFS.
#
# Environment: ZT_SLURM_DIR (/tmp/zt-slurm: state, logs, pids), ZT_SLURM_CPUS (CPUs declared per
# node, default 4: more than the cores, so that tests may run 4 tasks), ZT_SLURM_NODE_LOCAL
# (/mnt/nodelocal). Must run as root.
#
# Facts behind the settings (see docs/slurm.md): Debian's Open MPI only direct-launches
# with PMIx, whose Slurm plugin needs libpmix-dev's libpmix.so; declaring more CPUs than the
# hardware needs SlurmdParameters=config_overrides; without EnforcePartLimits a job that can never
# fit pends forever; two slurmd sharing /tmp collide on PMIx directories; daemons started with
# setsid/unshare/setpriv exec, so $! is the daemon.
set -euo pipefail

dir=${ZT_SLURM_DIR:-/tmp/zt-slurm}
cpus=${ZT_SLURM_CPUS:-4}
node_local=${ZT_SLURM_NODE_LOCAL:-/mnt/nodelocal}
conf=/etc/slurm/slurm.conf

say() { echo "local_slurm: $*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root"

# running NAME EXE: the recorded PID of NAME is alive (not a zombie) and runs EXE.
running() {
  local pid
  pid=$(cat "$dir/pids/$1" 2>/dev/null) || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

install_missing() {
  local need=0 f
  for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/sbin/munged \
           /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so; do
    [[ -e $f ]] || need=1
  done
  ((need)) || return 0
  # jobs/install_deps.sh names them (its test group), and keeps their daemons from starting.
  "$(dirname "$0")/../jobs/install_deps.sh" --with-tests
  return 0
}

write_config() {
  local nodes=$1 mem n
  mem=$(awk -v n="$nodes" '/^MemTotal:/ {print int($2 / 1024 * 0.9 / n)}' /proc/meminfo)
  mkdir -p /etc/slurm "$dir"/{state,log,pids,spool,nodetmp} "$node_local"
  {
    echo "# written by zerotrain's ctest/local_slurm.sh"
    echo "ClusterName=ztci"
    echo "SlurmctldHost=localhost"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=pmix"
    echo "MailProg=/bin/true"
    echo "ReturnToService=2"
    echo "SlurmdParameters=config_overrides"
    echo "EnforcePartLimits=ALL"
    echo "KillWait=10"
    echo "MinJobAge=600"
    echo "JobRequeue=1"
    if ((nodes == 1)); then
      echo "TmpFS=/tmp"
      echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem"
    else
      echo "TmpFS=$dir/nodetmp"
      for ((n = 1; n <= nodes; n++)); do
        echo "NodeName=node$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17100 + n)) CPUs=$cpus RealMemory=$mem"
        mkdir -p "$dir/spool/node$n" "$dir/nodes/node$n/local" "$dir/nodes/node$n/tmp"
      done
    fi
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$conf"
}

start_munge() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
  mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
  [[ -s /etc/munge/munge.key ]] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
  chmod 0400 /etc/munge/munge.key
  chmod 0700 /etc/munge /var/log/munge
  setsid setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F --force \
    >"$dir/log/munged.out" 2>&1 </dev/null &
  echo $! >"$dir/pids/munged"
  for _ in $(seq 40); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "munged did not start: $(tail -3 "$dir/log/munged.out")"
}

start_daemons() {
  local nodes=$1 n
  # Another cluster's slurmctld would answer our pings with its own configuration.
  if scontrol ping 2>/dev/null | grep -q 'is UP'; then
    die "a slurmctld not started from $dir is running; stop it first (its local_slurm.sh down, or kill it)"
  fi
  setsid /usr/sbin/slurmctld -D -c -i >"$dir/log/slurmctld.out" 2>&1 </dev/null &
  echo $! >"$dir/pids/slurmctld"
  for _ in $(seq 60); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.5; done
  scontrol ping 2>/dev/null | grep -q 'is UP' && running slurmctld slurmctld ||
    die "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.out")"
  if ((nodes == 1)); then
    setsid /usr/sbin/slurmd -D -c -N localhost >"$dir/log/slurmd-localhost.out" 2>&1 </dev/null &
    echo $! >"$dir/pids/slurmd-localhost"
    return
  fi
  for ((n = 1; n <= nodes; n++)); do
    setsid unshare --uts --mount --propagation private /bin/sh -c '
      set -e
      hostname "$1"
      mount --bind "$2/nodes/$1/local" "$3"
      mount --bind "$2/nodes/$1/tmp" "$2/nodetmp"
      mount -t tmpfs -o mode=1777 tmpfs /dev/shm
      exec /usr/sbin/slurmd -D -c -N "$1"' sh "node$n" "$dir" "$node_local" \
      >"$dir/log/slurmd-node$n.out" 2>&1 </dev/null &
    echo $! >"$dir/pids/slurmd-node$n"
  done
}

wait_idle() {
  local states n
  for _ in $(seq 120); do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
    [[ -n $states ]] && ! grep -qvE ' (idle|mixed|allocated)$' <<<"$states" && return 0
    for n in $(awk '$2 ~ /^(down|drain)/ {print $1}' <<<"$states"); do
      scontrol update nodename="$n" state=resume 2>/dev/null || true
    done
    sleep 0.5
  done
  die "nodes not idle after 60 s: $states"
}

down() {
  [[ -d $dir/pids ]] || return 0
  if running slurmctld slurmctld; then
    scancel --full $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    for _ in $(seq 40); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  local f name exe
  for pass in TERM KILL; do
    for f in "$dir"/pids/*; do
      [[ -e $f ]] || continue
      name=$(basename "$f")
      exe=${name%%-*}
      running "$name" "$exe" && kill -"$pass" "$(cat "$f")" 2>/dev/null || true
    done
    for _ in $(seq 40); do
      local left=0
      for f in "$dir"/pids/*; do [[ -e $f ]] && running "$(basename "$f")" "$(basename "$f" | cut -d- -f1)" && left=1; done
      ((left)) || break
      sleep 0.25
    done
  done
  rm -rf "$dir/pids"
}

case ${1:-} in
  up)
    nodes=${2:-1}
    [[ $nodes =~ ^[1-9][0-9]*$ ]] || die "NODES must be a positive number, got '$nodes'"
    down
    install_missing
    mkdir -p "$dir/pids"
    write_config "$nodes"
    start_munge
    start_daemons "$nodes"
    wait_idle
    say "up: $nodes node(s), $cpus CPUs each (logs in $dir/log)"
    ;;
  down) down ;;
  *) echo "usage: $0 up [NODES] | down" >&2; exit 2 ;;
esac
