#!/bin/sh
# Open MPI's remote-shell agent for the emulated nodes (mpirun --mca plm_rsh_agent THIS): where
# ssh would log in to <host> and hand the command line to its shell, this enters the node whose
# address is <host> (enter_node.sh) and hands the line to sh. mpirun calls it once per node other
# than its own, with the orted command line (quoted for a shell) after the host.
# usage: netns_rsh_agent.sh <host> <command line...>
host=$1
shift
exec sh "$(dirname "$0")/enter_node.sh" "$host" sh -c "$*"
