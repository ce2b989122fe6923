#!/bin/sh
# The planner's choice fits when run (issue 6): plan a small GPT for a device budget too small to
# keep everything on the device, then train 3 steps with that config and the same budget enforced
# by the device allocator (train's --device-mem). A choice that does not fit fails the run.
# usage: run_plan_fits.sh <tierzero> [precision: fp32 (default), bf16 or fp16]
tierzero=$1
precision=${2:-fp32}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
budget=48MiB
# Fixed rates keep the choice independent of the machine's speed.
echo '{"gemm_gflops": 50, "copy_gbps": 5, "nvme_read_gbps": 1, "nvme_write_gbps": 1,
       "adam_cpu_gbps": 5, "comm_gbps": 5}' > "$dir/cal.json"
"$tierzero" plan --layers 4 --heads 4 --channels 256 --vocab 257 --context 64 --seq 64 \
  --global-batch 8 --device-mem "$budget" --host-mem 1GiB --nvme 1GiB \
  --nvme-path "$dir/nvme" --calibration "$dir/cal.json" --precision "$precision" \
  -o "$dir/plan.json" || exit 1
cat "$dir/plan.json"
timeout -k 5 240 "$tierzero" train --config "$dir/plan.json" --steps 3 --threads 1 \
  --device-mem "$budget" || { echo "run_plan_fits: the planned config did not run"; exit 1; }
echo "run_plan_fits: OK"
