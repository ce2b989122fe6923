#!/bin/sh
# Multi-node training without a cluster: two emulated nodes, each a network namespace made here
# (with its own host name, /dev/shm and "NVMe drive": enter_node.sh), joined by a veth pair, run
# `tierzero train` with 2 ranks each (4 in all) at ZeRO stage 3 with parameters and optimizer
# states on NVMe. mpirun runs on node 1 and starts node 2's orted through a remote-shell agent
# that enters node 2 (netns_rsh_agent.sh) where a cluster would use ssh; Open MPI talks TCP over
# the veth (btl self,vader,tcp, the TCP transports restricted to its subnet), as between hosts.
# Checks, in order:
#   1. placement: a first job shows ranks 0-1 in node 1's namespace and 2-3 in node 2's, and a file
#      each rank writes under nvme_path lands on its own node's drive (none on the other's);
#   2. the job really crossed the network: the veth carried, each way, at least what node 2's
#      ranks must fetch from node 1's (and back) to gather every parameter once per step, half
#      the parameter bytes per step, so the test cannot pass over shared memory by accident;
#   3. the result matches one rank at stage 0 with micro-batch 2 x 4 (the data loader's replica
#      stride gives both the same tokens): every step's loss and gradient norm within 1e-5
#      relative, the final parameters (checkpoints) within 1e-5 absolute + 1e-5 relative
#      (tests/tp's tp_match_check), as the single-node ZeRO-3 NVMe tests.
# The namespaces and links are removed on exit, whatever happens (and those of earlier runs that
# were killed before they could, found by their dead pid). Where namespaces cannot be made (no
# CAP_SYS_ADMIN) it prints SKIP and exits 0 (CTest: skipped). The ranks' collectives have
# TIERZERO_COMM_TIMEOUT_S, and every launch a timeout of its own: nodes that cannot reach each
# other at all (e.g. btl without tcp) hang inside Open MPI's start-up, before TierZero's timeout
# applies, and that must fail the test well within CTest's limit, not hang it.
# usage: run_two_nodes.sh <tierzero> <tp_match_check> <mpiexec> [mpiexec args...]
tierzero=$1; check=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
steps=10; tol=1e-5

fail() { echo "FAIL: $1"; exit 1; }
command -v ip > /dev/null || fail "ip (iproute2) not found; scripts/setup.sh installs it"

# Namespaces and links of earlier runs whose script is gone (killed by CTest's timeout, which
# leaves no chance to clean up): named after its pid.
for ns in $(ip netns list 2> /dev/null | sed -n 's/^\(tz-n[12]-[0-9][0-9]*\)\b.*/\1/p'); do
  kill -0 "${ns##*-}" 2> /dev/null && continue
  pids=$(ip netns pids "$ns" 2> /dev/null)
  [ -n "$pids" ] && kill -9 $pids 2> /dev/null
  ip netns del "$ns" && echo "removed the network namespace $ns of a dead run"
done
for link in $(ip -o link show 2> /dev/null | sed -n 's/^[0-9]*: \(tzv1-[0-9][0-9]*\)@.*/\1/p'); do
  kill -0 "${link##*-}" 2> /dev/null || ip link del "$link"
done

n1=tz-n1-$$; n2=tz-n2-$$; v1=tzv1-$$; v2=tzv2-$$
a1=10.211.0.1; a2=10.211.0.2; subnet=10.211.0.0/24
dir=$(mktemp -d)
made=""
cleanup() {
  for ns in $made; do
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null
    ip netns del "$ns" || echo "warning: could not delete the network namespace $ns"
  done
  ip link del "$v1" 2> /dev/null  # only where it never reached its namespace
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$n1" 2> "$dir/err"; then
  echo "SKIP: cannot create a network namespace here (needs CAP_SYS_ADMIN): $(cat "$dir/err")"
  exit 0
fi
made=$n1
ip netns add "$n2" || fail "cannot create the second network namespace $n2"
made="$n1 $n2"
# Each end of the veth in its node, with its address; loopback up for each node's own traffic.
ip link add "$v1" type veth peer name "$v2" &&
  ip link set "$v1" netns "$n1" && ip link set "$v2" netns "$n2" &&
  ip -n "$n1" addr add "$a1/24" dev "$v1" && ip -n "$n2" addr add "$a2/24" dev "$v2" &&
  ip -n "$n1" link set lo up && ip -n "$n2" link set lo up &&
  ip -n "$n1" link set "$v1" up && ip -n "$n2" link set "$v2" up ||
  fail "cannot link the namespaces $n1 and $n2 with the veth pair $v1/$v2"
echo "node 1: netns $n1, $v1 $a1; node 2: netns $n2, $v2 $a2"

# One nvme_path for every rank (as on a cluster: the same local path on each node), backed on
# each node by its own directory.
mkdir "$dir/nvme" "$dir/drive1" "$dir/drive2" || fail "cannot make the drive directories"
export TZ_MN_NODES="$a1:$n1:tz-node-1:$dir/drive1 $a2:$n2:tz-node-2:$dir/drive2"
export TZ_MN_NVME="$dir/nvme"
printf '%s slots=2\n%s slots=2\n' "$a1" "$a2" > "$dir/hostfile"
# on_two_nodes <timeout_s> <program...>: the launcher on node 1, 2 ranks on each node, node 2
# reached through the agent, TCP between the nodes on the veth's subnet only; the comm timeout and
# thread count exported to every rank (-x) as a real cluster needs (node 2 here would inherit them
# anyway). The launcher command is split at spaces.
launcher="$*"
on_two_nodes() {
  limit=$1; shift
  timeout -k 5 "$limit" sh "$here/enter_node.sh" "$a1" $launcher --hostfile "$dir/hostfile" -n 4 \
    --map-by ppr:2:node --mca plm_rsh_agent "sh $here/netns_rsh_agent.sh" --mca btl "${btl:-self,vader,tcp}" \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    -x TIERZERO_COMM_TIMEOUT_S -x OMP_NUM_THREADS "$@"
}
tx() { ip netns exec "$n1" cat "/sys/class/net/$v1/statistics/$1_bytes"; }

# 1. Placement.
echo "placement: $launcher --hostfile (2 slots on each node) -n 4"
on_two_nodes 60 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK: host $(hostname), $(readlink /proc/self/ns/net)" &&
  : > "$TZ_MN_NVME/rank$OMPI_COMM_WORLD_RANK"' > "$dir/placement" 2>&1
rc=$?
cat "$dir/placement"
[ $rc -eq 0 ] || fail "the placement job exited $rc"
ns1=$(ip netns exec "$n1" readlink /proc/self/ns/net); ns2=$(ip netns exec "$n2" readlink /proc/self/ns/net)
for r in 0 1 2 3; do
  node=$((r / 2 + 1)); ns=$ns1; [ $node -eq 2 ] && ns=$ns2
  grep -qxF "rank $r: host tz-node-$node, $ns" "$dir/placement" ||
    fail "rank $r is not on node $node (netns $ns)"
  [ -f "$dir/drive$node/rank$r" ] && [ ! -f "$dir/drive$((3 - node))/rank$r" ] ||
    fail "rank $r's file under nvme_path is not on node $node's drive alone"
  rm -f "$dir/drive$node/rank$r"
done
[ -z "$(ls -A "$dir/nvme")" ] || fail "a rank wrote to the mount point itself, not a node's drive"
echo "placement: ranks 0-1 on node 1, 2-3 on node 2, each writing nvme_path on its node's drive"

# The configs: persistence threshold 0, so that stage 3 gathers and releases every unit each step.
# (buffer_size, the NVMe optimizer's chunk in elements, is the optimizer's key only.)
pnvme="{\"device\": \"nvme\", \"nvme_path\": \"$TZ_MN_NVME\"}"
nvme="{\"device\": \"nvme\", \"nvme_path\": \"$TZ_MN_NVME\", \"buffer_size\": 30000}"
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $3, "gradient_clipping": 0.5,
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0 $4},
 "tierzero": {"steps": $steps, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 2,
              "host_memory_budget_gb": 0.5,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 16}}}
JSON
}
write_config "$dir/ref.json" 0 8 ""
write_config "$dir/nodes.json" 3 2 ", \"offload_param\": $pnvme, \"offload_optimizer\": $nvme"
echo "two nodes: $(cat "$dir/nodes.json")"

echo "reference: one rank, stage 0, micro-batch 8"
start=$(date +%s)
timeout -k 5 180 "$tierzero" train --config "$dir/ref.json" --metrics "$dir/ref.jsonl" \
  --save "$dir/ref.bin" > "$dir/ref.out" 2>&1
rc=$?
cat "$dir/ref.out"
[ $rc -eq 0 ] || fail "the reference run exited $rc"
echo "reference: $(($(date +%s) - start)) s"

echo "two nodes x 2 ranks: stage 3, parameters and optimizer states on each node's NVMe drive"
tx1=$(tx tx); rx1=$(tx rx)
start=$(date +%s)
on_two_nodes 150 "$tierzero" train --config "$dir/nodes.json" \
  --metrics "$dir/nodes.jsonl" --save "$dir/nodes.bin" > "$dir/nodes.out" 2>&1
rc=$?
cat "$dir/nodes.out"
[ $rc -eq 0 ] || fail "the two-node run exited $rc"
echo "two nodes: $(($(date +%s) - start)) s"
left=$(find "$dir/drive1" "$dir/drive2" "$dir/nvme" -mindepth 1)
[ -z "$left" ] || fail "swap left on a node's drive: $left"

# 2. Traffic: node 1 -> node 2 is the veth's tx on node 1, node 2 -> node 1 its rx.
sent=$(($(tx tx) - tx1)); received=$(($(tx rx) - rx1))
params=$(($(stat -c %s "$dir/ref.bin") - 1024))  # fp32 parameters after the 256-int header
floor=$((steps * params / 2))
echo "veth $v1: node 1 -> node 2 $sent bytes, node 2 -> node 1 $received bytes;" \
  "floor $floor each way ($steps steps x half of $params parameter bytes)"
[ "$sent" -ge "$floor" ] && [ "$received" -ge "$floor" ] ||
  fail "the nodes exchanged less than the parameter gathers need: not over the network"

# 3. Against the reference.
field() { sed -n "s/.*\"$1\": *\([^,]*\),.*/\1/p" "$2"; }
bad=0
for f in loss grad_norm; do
  field "$f" "$dir/ref.jsonl" > "$dir/ref.$f"
  field "$f" "$dir/nodes.jsonl" > "$dir/nodes.$f"
  paste "$dir/ref.$f" "$dir/nodes.$f" | awk -v tol="$tol" -v what="$f" -v steps="$steps" '
    function abs(v) { return v < 0 ? -v : v }
    { n++; d = abs($1 - $2); r = d / abs($1);
      printf "step %d: reference %s %.9f, two nodes %.9f, abs err %.3g, rel err %.3g\n", n, what, $1, $2, d, r;
      if (d > max_abs) max_abs = d; if (r > max_rel) max_rel = r }
    END {
      printf "%s: max abs err %.3g, max rel err %.3g over %d steps (tolerance %g relative)\n", what, max_abs, max_rel, n, tol;
      if (n != steps) { print "FAIL: expected " steps " steps from each run"; exit 1 }
      if (max_rel > tol) { print "FAIL: " what " differs beyond the tolerance"; exit 1 } }' || bad=1
done
"$check" checkpoints "$dir/ref.bin" "$dir/nodes.bin" "$tol" "$tol" || bad=1
[ $bad -eq 0 ] || fail "the two-node run does not match the one-rank reference"

# 4. Nodes that cannot reach each other (no TCP transport between them): Open MPI says it will
# abort and does not; TierZero's start-up watchdog must end every rank with a clear error within
# the communication timeout, not hang.
echo "unreachable nodes (btl self,vader): every rank must stop within TIERZERO_COMM_TIMEOUT_S=10"
start=$(date +%s)
TIERZERO_COMM_TIMEOUT_S=10 btl=self,vader on_two_nodes 90 "$tierzero" train \
  --config "$dir/nodes.json" > "$dir/unreachable.out" 2>&1
rc=$?
took=$(($(date +%s) - start))
grep -m 4 "error" "$dir/unreachable.out"
echo "unreachable nodes: exit $rc after $took s"
[ $rc -ne 0 ] || fail "a job whose nodes cannot reach each other exited 0"
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "a job whose nodes cannot reach each other hung"
grep -q "MPI start-up did not finish" "$dir/unreachable.out" ||
  fail "no start-up timeout message from a job whose nodes cannot reach each other"
echo "run_two_nodes: OK"
