#!/bin/sh
# Runs a command on one emulated node of the two-node test (run_two_nodes.sh): inside the node's
# network namespace, with the node's own host name (a UTS namespace), its own /dev/shm and its
# own "NVMe drive" (a directory bind-mounted at the path the config names). So the two nodes
# share nothing that real nodes would not: no loopback or shared-memory path between them
# (Open MPI's vader names its segments by host name and local rank, which would collide in one
# /dev/shm), and each node's ranks swap to their own drive under one nvme_path.
# `ip netns exec` already gives the command a mount namespace of its own whose mounts do not
# propagate back (it makes / a slave), so the mounts below are seen by this node's processes
# only, and vanish with them.
# The nodes come from TZ_MN_NODES, one "address:netns:hostname:drive" word per node, and the
# shared mount point from TZ_MN_NVME (both set by run_two_nodes.sh, inherited through mpirun).
# usage: enter_node.sh <address> <command> [args...]
addr=$1
shift
for node in $TZ_MN_NODES; do
  IFS=: read -r a ns name drive <<EOF
$node
EOF
  if [ "$a" = "$addr" ]; then
    exec ip netns exec "$ns" unshare --uts sh -c '
      hostname "$1" || { echo "enter_node: cannot set the host name $1" >&2; exit 1; }
      mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm ||
        { echo "enter_node: cannot mount a private /dev/shm for $1" >&2; exit 1; }
      mount --bind "$2" "$3" ||
        { echo "enter_node: cannot bind $1 drive $2 at $3" >&2; exit 1; }
      shift 3
      exec "$@"' enter_node "$name" "$drive" "$TZ_MN_NVME" "$@"
  fi
done
echo "enter_node: no emulated node has address '$addr' (nodes: $TZ_MN_NODES)" >&2
exit 1
