#!/bin/sh
# Estimator against measurement (issue 6): a small GPT at every ZeRO stage and offload option
# that the stage allows, trained for 2 steps on <ranks> ranks with `--memory-json`; each rank's
# memory file is compared with `tierzero estimate --json` for the same config (see
# estimate_match_check.cpp for the rules: model state exact, activation peak within 10%, buffer
# peaks within their bounds). Needs the store's offload support and train's --memory-json.
# TIERZERO_TEST_TP (default 1) and TIERZERO_TEST_SP (true/false, default false) run every case
# tensor-parallel (issue 14): each rank's memory against the estimate for its per-rank layout.
# TIERZERO_TEST_WIRE (default fp32) is communication_data_type: with bf16 the reductions are
# widened to fp32 in MPI's host staging, which the pinned pool holds where there is one.
# TIERZERO_TEST_PRECISION (default fp32): bf16, bf16 working parameters computed in fp32 (stage 3
# widens each gathered unit); bf16_compute, the same in 16-bit compute (issue 26: the gathered
# units used as they are, the activations in bf16).
# usage: run_estimate_match.sh <tierzero> <estimate_match_check> <ranks> <mpiexec and args...>
tierzero=$1; check=$2; ranks=$3; shift 3
tp=${TIERZERO_TEST_TP:-1}
sp=${TIERZERO_TEST_SP:-false}
wire=${TIERZERO_TEST_WIRE:-fp32}
precision=""; compute=fp32
case "${TIERZERO_TEST_PRECISION:-fp32}" in
  fp32) ;;
  bf16) precision=', "bf16": {"enabled": true}' ;;
  bf16_compute) precision=', "bf16": {"enabled": true}'; compute=bf16 ;;
  *) echo "unknown TIERZERO_TEST_PRECISION $TIERZERO_TEST_PRECISION"; exit 2 ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/nvme"
fail=0
for stage in 0 1 2 3; do
  for option in none optimizer_cpu optimizer_nvme param_optimizer_cpu param_optimizer_nvme; do
    case $option in
      none) param=none; optim=none ;;
      optimizer_cpu) param=none; optim=cpu ;;
      optimizer_nvme) param=none; optim=nvme ;;
      param_optimizer_cpu) param=cpu; optim=cpu ;;
      param_optimizer_nvme) param=nvme; optim=nvme ;;
    esac
    [ "$param" != none ] && [ "$stage" -ne 3 ] && continue
    [ "$optim" != none ] && [ "$stage" -eq 0 ] && continue
    case_dir="$dir/s${stage}_$option"
    mkdir -p "$case_dir"
    # Persistence threshold 0 so stage 3 really gathers and releases every unit.
    cat > "$case_dir/config.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "communication_data_type": "$wire" $precision,
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0,
   "offload_param": {"device": "$param", "nvme_path": "$dir/nvme"},
   "offload_optimizer": {"device": "$optim", "nvme_path": "$dir/nvme", "buffer_size": 65536}},
 "tierzero": {"steps": 2, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 1,
              "tensor_parallel": $tp, "sequence_parallel": $sp, "compute_dtype": "$compute",
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
    echo "== stage $stage, $option, $ranks ranks, tensor_parallel $tp, sequence_parallel $sp, wire $wire, compute $compute"
    "$tierzero" estimate --config "$case_dir/config.json" --ranks "$ranks" --json \
      > "$case_dir/estimate.json" || { fail=1; continue; }
    timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$case_dir/config.json" \
      --memory-json "$case_dir/mem.json" > "$case_dir/train.log" 2>&1 ||
      { tail -5 "$case_dir/train.log"; fail=1; continue; }
    files="$case_dir/mem.json"
    r=1
    while [ "$r" -lt "$ranks" ]; do files="$files $case_dir/mem.json.rank$r"; r=$((r + 1)); done
    # shellcheck disable=SC2086
    "$check" "$case_dir/estimate.json" $files || fail=1
  done
done
[ "$fail" -eq 0 ] && echo "run_estimate_match: OK" || echo "run_estimate_match: FAILED"
exit "$fail"
