#!/usr/bin/env bash
# An rsh agent for Open MPI (plm_rsh_agent) that turns host names into simulated nodes on this
# machine, for the node-local storage tests:
#   OMPI_MCA_plm_rsh_agent=ctest/fake_node_rsh.sh mpirun -H n1:2,n2:2 -np 4 ./app
# Open MPI runs `<agent> [ssh options] <host> <orted command>`. We start that command here, in new
# UTS and mount namespaces: the host name becomes <host>, $ZT_FAKE_NODE_ROOT/<host> is mounted on
# $ZT_FAKE_NODE_MOUNT (the node's own "local disk"), and /dev/shm is private. Open MPI then sees
# one shared-memory group per host. Host names must not resolve to a local address.
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
host=$1
shift
root=${ZT_FAKE_NODE_ROOT:?set ZT_FAKE_NODE_ROOT}
mount_point=${ZT_FAKE_NODE_MOUNT:?set ZT_FAKE_NODE_MOUNT}
mkdir -p "$root/$host" "$mount_point"
exec unshare --uts --mount --propagation private /bin/sh -c \
  'hostname "$1" && mount --bind "$2" "$3" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec /bin/sh -c "$4"' \
  sh "$host" "$root/$host" "$mount_point" "$*"
