#!/bin/sh
# `tierzero train` through the ZeRO partition store against the one-rank reference, end to end
# with the real binary: <ranks> ranks at stage <stage> with micro-batch 2 must print the same
# per-step losses (the --metrics file, full precision) as one rank at stage 0 with micro-batch
# 2 x <ranks>, since the data loader's rank stride gives both the same tokens per step. With
# <ranks> = 0 the store runs on one rank without a launcher (an MPI singleton) against micro-batch
# 2. <variant> sets where the store run keeps its states and how it computes: plain (all on the
# device tier), opt_host, opt_nvme, all_host, all_nvme (params and optimizer), half (half the
# units' params on NVMe and optimizer states on the host), nvme_grads (params, optimizer and
# gradient shards on NVMe), opt_nvme_grads (optimizer and gradients on NVMe), ckpt (activation checkpointing),
# blocks2 (two transformer blocks per store unit: bigger gathers and reduce-scatters), bf16 and
# fp16 (16-bit working parameters with fp32 masters; fp16 with dynamic loss scaling).
# Prints every step's losses and the max absolute and relative error. TIERZERO_TEST_DEVICE
# (e.g. cuda) runs both on that device; where it cannot be opened the script prints
# "no CUDA device" with the reason and exits 0, which CTest reports as skipped.
# usage: run_train_match.sh <tierzero> <ranks> <stage> <rel_tol> <variant> [mpiexec command...]
tierzero=$1; ranks=$2; stage=$3; tol=$4; variant=$5; shift 5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/../test_device_args.sh"
ref_batch=$((2 * (ranks > 0 ? ranks : 1)))

# (buffer_size, the NVMe optimizer's chunk in elements, is the optimizer's key only.)
nvme() { echo "{\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_size\": 3000$1}"; }
pnvme() { echo "{\"device\": \"nvme\", \"nvme_path\": \"$dir\"$1}"; }
offload=""; ckpt=false; blocks=1; precision=""; extra=""
case "$variant" in
  plain) ;;
  opt_host) offload=', "offload_optimizer": {"device": "cpu"}' ;;
  opt_nvme) offload=", \"offload_optimizer\": $(nvme)" ;;
  all_host) offload=', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' ;;
  all_nvme) offload=", \"offload_param\": $(pnvme), \"offload_optimizer\": $(nvme)" ;;
  nvme_grads) offload=", \"offload_param\": $(pnvme), \"offload_optimizer\": $(nvme)"
              extra='"offload_gradients": "nvme",' ;;
  opt_nvme_grads) offload=", \"offload_optimizer\": $(nvme)"; extra='"offload_gradients": "nvme",' ;;
  half) offload=", \"offload_param\": $(pnvme ', "ratio": 0.5'), \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}" ;;
  ckpt) ckpt=true ;;
  blocks2) blocks=2 ;;
  bf16) precision='"bf16": {"enabled": true},' ;;
  fp16) precision='"fp16": {"enabled": true},' ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac

# write_config <file> <stage> <micro_batch> <offload> <checkpointing> <blocks> [precision]
# [tierzero keys]:
# persistence threshold 0 so that stage 3 really gathers and releases every unit.
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $3, $7
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0 $4},
 "tierzero": {$8 "steps": 5, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 2,
              "activation_checkpointing": $5, "blocks_per_unit": $6,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
}
write_config "$dir/ref.json" 0 "$ref_batch" "" false 1
write_config "$dir/zero.json" "$stage" 2 "$offload" "$ckpt" "$blocks" "$precision" "$extra"
echo "variant $variant: $(cat "$dir/zero.json")"

echo "reference: one rank, stage 0, micro-batch $ref_batch ${device_args}"
if ! timeout -k 5 120 "$tierzero" train --config "$dir/ref.json" --metrics "$dir/ref.jsonl" \
    $device_args > "$dir/ref.out" 2>&1; then
  cat "$dir/ref.out"
  if [ -n "$device_args" ] && grep -q "cannot open cuda" "$dir/ref.out"; then
    echo "no CUDA device: $(grep "cannot open cuda" "$dir/ref.out" | head -n 1)"
    exit 0
  fi
  exit 1
fi
cat "$dir/ref.out"
if [ "$ranks" -gt 0 ]; then
  echo "store: $* -n $ranks, stage $stage, micro-batch 2"
  timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$dir/zero.json" \
    --metrics "$dir/zero.jsonl" --memory-json "$dir/zero.mem.json" $device_args || exit 1
else
  echo "store: one rank without a launcher, stage $stage, micro-batch 2"
  timeout -k 5 120 "$tierzero" train --config "$dir/zero.json" --metrics "$dir/zero.jsonl" \
    --memory-json "$dir/zero.mem.json" $device_args || exit 1
fi
# The gradient variants must really keep their gradient shards on NVMe (a setting that did not
# reach the store would train alike with them on the host).
if [ -n "$extra" ]; then
  python3 - "$dir/zero.mem.json" <<'PY' || exit 1
import json, sys
grad = {t: json.load(open(sys.argv[1]))["tiers"][t]["grad"]["current"] for t in ("host", "nvme")}
print(f"gradient shards: nvme {grad['nvme']} bytes, host {grad['host']} bytes")
if grad["nvme"] == 0 or grad["host"] != 0:
    print("FAIL: the gradient shards are not on NVMe"); sys.exit(1)
PY
fi

# Pairs the "loss" fields of the two files line by line.
loss_of() { sed -n 's/.*"loss": *\([^,]*\),.*/\1/p' "$1"; }
loss_of "$dir/ref.jsonl" > "$dir/ref.loss"
loss_of "$dir/zero.jsonl" > "$dir/zero.loss"
paste "$dir/ref.loss" "$dir/zero.loss" | awk -v tol="$tol" '
  function abs(v) { return v < 0 ? -v : v }
  { n++; d = abs($1 - $2); r = d / abs($1);
    printf "step %d: reference loss %.9f, store loss %.9f, abs err %.3g, rel err %.3g\n", n, $1, $2, d, r;
    if (d > max_abs) max_abs = d; if (r > max_rel) max_rel = r }
  END {
    printf "max abs err %.3g, max rel err %.3g over %d steps (tolerance %g relative)\n", max_abs, max_rel, n, tol;
    if (n != 5) { print "FAIL: expected 5 steps from each run"; exit 1 }
    if (max_rel > tol) { print "FAIL: losses differ beyond the tolerance"; exit 1 }
    print "run_train_match: OK" }'
