#!/bin/sh
# Activation checkpoints on a tier (issue 31) end to end with the real binary: with activation
# checkpointing on, a run with the checkpoints in pinned host memory and one with them on NVMe
# must give the same loss and gradient norm bits at every step as the run with them on the
# device. <mode> picks the parallelism: one (one rank, the reference path), zero3 (2 ranks,
# ZeRO-3 with parameters and optimizer on the host), tp2 (+ Megatron sequence parallelism: the
# checkpoint is the sequence shard), pp2 (1F1B, 4 micro-batches: several micro-batches'
# checkpoints at once; the second stage receives its input into a checkpoint slot, also posted
# ahead with pipeline_receive_ahead, which takes a third slot, so with 2 it waits for the action),
# ulysses2; budget: a run whose checkpoints exceed the device and the host budget trains with them
# on NVMe (and the same run with them on the host is refused).
# usage: run_actoff.sh <tierzero> <mode> <mpiexec command...>
tierzero=$1; mode=$2; shift 2
MPI="$*"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ranks=2; stage=0; extra=""; args=""; layers=4
case "$mode" in
  one) ranks=1 ;;
  zero3) stage=3; extra=', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' ;;
  tp2) args="--tp 2 --sequence-parallel" ;;
  pp2) args="--pp 2 --micro-batches 4"; layers=6 ;;
  ulysses2) stage=3; args="--ulysses 2" ;;
  budget) ranks=1; layers=8 ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5,
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0 $extra},
 "tierzero": {"steps": 4, "seq_len": 32, "seed": 7, "threads": 1, "val_batches": 0,
              "activation_checkpointing": true,
              "model": {"vocab_size": 257, "n_layer": $layers, "n_head": 4, "n_embd": 64,
                        "context_length": 32}}}
JSON
launch() { if [ "$ranks" -gt 1 ]; then echo "$MPI -n $ranks"; fi; }
run() {  # run <name> <flags...>: trains, keeps the loss and gradient norm of every step
  name=$1; shift
  timeout -k 5 240 $(launch) "$tierzero" train --config "${conf:-$dir/run.json}" $args "$@" \
    --metrics "$dir/$name.jsonl" > "$dir/$name.out" 2>&1 || { cat "$dir/$name.out"; return 1; }
  grep -o '"step":[0-9]*\|"loss":[^,]*\|"grad_norm":[^,]*' "$dir/$name.jsonl" > "$dir/$name.bits"
}
same() {  # same <name> <reference>: bitwise equal losses and gradient norms
  if cmp -s "$dir/$1.bits" "$dir/$2.bits" && [ -s "$dir/$1.bits" ]; then
    echo "$mode: $1 matches $2 bit for bit ($(grep -c loss "$dir/$1.bits") steps)"
  else
    echo "FAIL: $mode: $1 differs from $2"; diff "$dir/$2.bits" "$dir/$1.bits" | head; exit 1
  fi
}
if [ "$mode" = budget ]; then
  # 24 blocks of (4 x 64, 64) fp32 checkpoints: 23 x 64 KiB stored. Measured peaks set the
  # budgets: a device budget halfway between the device peak with the checkpoints on the device
  # and with them on NVMe, a host budget halfway between the host peak with them on the host and
  # with them on NVMe (small aio buffers). The device and host runs must be refused, NVMe trains.
  sed -i 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4, "aio": {"block_size": 65536, "queue_depth": 4}/; s/"seq_len": 32/"seq_len": 64/; s/"context_length": 32/"context_length": 64/; s/"n_layer": 8/"n_layer": 24/' "$dir/run.json"
  peak() {  # peak <memory json> <tier>
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tier_peaks'][sys.argv[2]])" "$1" "$2"
  }
  run device --activation-offload device --memory-json "$dir/device.mem" || exit 1
  run host --activation-offload host --memory-json "$dir/host.mem" || exit 1
  run nvme --activation-offload nvme --nvme-path "$dir" --memory-json "$dir/nvme.mem" || exit 1
  dev_mem=$(( ($(peak "$dir/device.mem" device) + $(peak "$dir/nvme.mem" device)) / 2 ))
  host_mem=$(( ($(peak "$dir/host.mem" host) + $(peak "$dir/nvme.mem" host)) / 2 ))
  echo "budget: device $dev_mem bytes, host $host_mem bytes (between the placements' peaks)"
  budgets="--device-mem $dev_mem --host-mem $host_mem"
  for tier in device host; do
    if timeout -k 5 240 "$tierzero" train --config "$dir/run.json" --activation-offload $tier \
        $budgets > "$dir/refused_$tier.out" 2>&1; then
      echo "FAIL: budget: checkpoints on the $tier trained within budgets they exceed"; exit 1
    fi
    grep -o "[a-z]* memory budget exceeded[^;]*" "$dir/refused_$tier.out" | head -1
  done
  run nvme_budget --activation-offload nvme --nvme-path "$dir" $budgets || exit 1
  same nvme_budget device
  exit 0
fi
run device --activation-offload device || exit 1
run host --activation-offload host || exit 1
same host device
run nvme --activation-offload nvme --nvme-path "$dir" || exit 1
same nvme device
if [ "$mode" = pp2 ]; then
  # Interleaved (rank 0's second chunk receives from rank 1), receives posted ahead: with 3 slots
  # the forward inputs' receives are posted ahead into a store slot, with 2 they wait for their
  # action (rank 0's metrics count them); the bits match the same schedule's device run.
  il='"pipeline_schedule": "interleaved", "pipeline_virtual_stages": 2, "pipeline_receive_ahead": true,'
  for slots in 3 2; do
    conf="$dir/ahead$slots.json"
    sed 's/"val_batches": 0,/"val_batches": 0, '"$il"' "activation_checkpoints": {"buffer_count": '$slots'},/' \
      "$dir/run.json" > "$conf"
    [ "$slots" = 3 ] && { run il_device --activation-offload device || exit 1; }
    run "il_host_$slots" --activation-offload host || exit 1
    same "il_host_$slots" il_device
  done
  ahead3=$(grep -o '"pp_posted_ahead":[0-9]*' "$dir/il_host_3.jsonl" | awk -F: '{s += $2} END {print s + 0}')
  ahead2=$(grep -o '"pp_posted_ahead":[0-9]*' "$dir/il_host_2.jsonl" | awk -F: '{s += $2} END {print s + 0}')
  echo "pp2: receives posted ahead: $ahead3 with 3 checkpoint slots, $ahead2 with 2"
  [ "$ahead3" -gt "$ahead2" ] || { echo "FAIL: pp2: no forward receive was posted ahead into a slot"; exit 1; }
fi
grep -A3 "activation_checkpoint" "$dir/nvme.out" | head -4
exit 0
