#!/bin/sh
# Tensor and pipeline parallelism end to end with the real binary (issues 14, 15): <ranks> ranks
# as dp x <tp> x TZ_PP (pipeline stages, default 1)
# (sequence parallelism <sp>: true/false) at ZeRO stage <stage> train 10 steps with micro-batch 2
# and gradient clipping, against one rank at stage 0 with micro-batch 2 x dp (the data loader's
# replica stride gives both the same tokens per step). Every step's loss and gradient norm (the
# norm over the whole model, replicated tensors once) must agree within <tol> relative, and the
# final parameters (checkpoints saved by both; the tensor-parallel one assembled from the ranks'
# pieces) within <tol> absolute + <tol> relative (a parameter whose gradient is noise near 0 can
# take an Adam step of another sign). At stage 0 each rank's parameter bytes must be at most
# <ratio> of the reference's (a 1/tp share plus the replicated tensors). <variant>: plain, nvme
# (parameters and optimizer states on NVMe at stage 3, optimizer only below), host (the same in
# pinned host memory), ckpt (activation checkpointing). TIERZERO_TEST_DEVICE (e.g. cuda) runs both on that device; where it cannot be
# opened the script prints "no CUDA device" and exits 0 (CTest: skipped).
# Pipeline runs (TZ_PP > 1) take TZ_SCHEDULE (gpipe, 1f1b or interleaved with
# TZ_VIRTUAL_STAGES chunks per rank; TZ_RECEIVE_AHEAD true posts receives ahead) and
# TZ_MICRO_BATCHES micro-batches. TZ_CLASSIFIER_CHUNK: the parallel run's classifier in chunks of
# that many tokens (model.classifier_chunk_tokens; the reference keeps whole logits).
# TZ_COMPUTE (bf16 or fp16): both runs with those working parameters and 16-bit compute
# (tierzero.compute_dtype), the reference then the 16-bit one-rank run the split must follow; the
# parallel run must say it computed in 16 bits. TZ_PARAM_TOL: the final parameters' tolerance
# (default <tol>): a 16-bit run's rounding flips the sign of Adam steps whose gradient is near 0
# per step (the reference accumulates as many), and every rank's activation peak must be exactly
# its schedule's in-flight bound, and every rank's --profile must show its stage's forwards,
# backwards and receive waits. TZ_LAYERS: the model's blocks (default 2; pp 4 needs 4). With
# tensor parallelism or Ulysses, rank 0's profile must carry their collectives' bytes as the
# metrics count them.
# usage: run_tp_match.sh <tierzero> <tp_match_check> <ranks> <tp> <sp> <stage> <variant> <tol>
#                        <ratio> <mpiexec command...>
tierzero=$1; check=$2; ranks=$3; tp=$4; sp=$5; stage=$6; variant=$7; tol=$8; ratio=$9
shift 9
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/../test_device_args.sh"
pp=${TZ_PP:-1}; schedule=${TZ_SCHEDULE:-1f1b}; micro=${TZ_MICRO_BATCHES:-1}
virtual=${TZ_VIRTUAL_STAGES:-1}; ahead=${TZ_RECEIVE_AHEAD:-false}
layers=${TZ_LAYERS:-2}; ulysses=${TZ_ULYSSES:-1}
chunk_key=""
compute=${TZ_COMPUTE:-fp32}; precision_key=""
[ "$compute" != fp32 ] && precision_key="\"$compute\": {\"enabled\": true},"
dp=$((ranks / (tp * pp * ulysses)))
ref_batch=$((2 * dp))

# (buffer_size, the NVMe optimizer's chunk in elements, is the optimizer's key only.)
nvme() { echo "{\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_size\": 30000}"; }
pnvme() { echo "{\"device\": \"nvme\", \"nvme_path\": \"$dir\"}"; }
offload=""; ckpt=false; grads=""
case "$variant" in
  plain) ;;
  nvme) if [ "$stage" -eq 3 ]; then offload=", \"offload_param\": $(pnvme), \"offload_optimizer\": $(nvme)"
        else offload=", \"offload_optimizer\": $(nvme)"; fi ;;
  host) if [ "$stage" -eq 3 ]; then offload=", \"offload_param\": {\"device\": \"cpu\"}, \"offload_optimizer\": {\"device\": \"cpu\"}"
        else offload=", \"offload_optimizer\": {\"device\": \"cpu\"}"; fi ;;
  # Gradient shards on NVMe too (stages 2-3): the tied embeddings' sum over the pipeline's ends,
  # the replicated tensors' broadcast over tp and the norm stream them chunk by chunk.
  nvme_grads) if [ "$stage" -eq 3 ]; then offload=", \"offload_param\": $(pnvme), \"offload_optimizer\": $(nvme)"
        else offload=", \"offload_optimizer\": $(nvme)"; fi
        grads='"offload_gradients": "nvme",' ;;
  ckpt) ckpt=true ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac

# write_config <file> <stage> <micro_batch> <offload> <checkpointing> <tp> <sp> <pp> <virtual> <ulysses>
#              <extra tierzero keys>:
# persistence threshold 0 so that stage 3 really gathers and releases every unit; 4 heads so tp 2
# and 4 split.
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $3, "gradient_clipping": 0.5, $precision_key
 "gradient_accumulation_steps": $micro,
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0 $4},
 "tierzero": {"steps": 10, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 2, ${11}
              "activation_checkpointing": $5, "tensor_parallel": $6, "sequence_parallel": $7,
              "pipeline_parallel": $8, "pipeline_schedule": "$schedule",
              "pipeline_virtual_stages": $9, "pipeline_receive_ahead": $ahead,
              "ulysses_parallel": ${10}, "compute_dtype": "$compute",
              "model": {"vocab_size": 257, "n_layer": $layers, "n_head": 4, "n_embd": 64,
                        $chunk_key "context_length": 16}}}
JSON
}
write_config "$dir/ref.json" 0 "$ref_batch" "" false 1 false 1 1 1 ""
[ -n "${TZ_CLASSIFIER_CHUNK:-}" ] && chunk_key="\"classifier_chunk_tokens\": $TZ_CLASSIFIER_CHUNK,"
write_config "$dir/tp.json" "$stage" 2 "$offload" "$ckpt" "$tp" "$sp" "$pp" "$virtual" "$ulysses" \
  "$grads"
echo "variant $variant: $(cat "$dir/tp.json")"

echo "reference: one rank, stage 0, micro-batch $ref_batch ${device_args}"
if ! timeout -k 5 180 "$tierzero" train --config "$dir/ref.json" --metrics "$dir/ref.jsonl" \
    --save "$dir/ref.bin" --memory-json "$dir/ref.mem.json" $device_args > "$dir/ref.out" 2>&1; then
  cat "$dir/ref.out"
  if [ -n "$device_args" ] && grep -q "cannot open cuda" "$dir/ref.out"; then
    echo "no CUDA device: $(grep "cannot open cuda" "$dir/ref.out" | head -n 1)"
    exit 0
  fi
  exit 1
fi
cat "$dir/ref.out"
echo "parallel: $* -n $ranks, dp $dp x tp $tp x pp $pp ($schedule, $micro micro-batches) x ulysses $ulysses, sequence parallel $sp, stage $stage"
profile_args=""
# With their activities kept, the profiles must carry the pipeline's transfers and rank 0's the
# tp / Ulysses collectives' bytes.
if [ "$pp" -gt 1 ] || [ "$tp" -gt 1 ] || [ "$ulysses" -gt 1 ]; then
  profile_args="--profile $dir/tp.prof.json --profile-timeline"
fi
timeout -k 5 300 "$@" -n "$ranks" "$tierzero" train --config "$dir/tp.json" \
  --metrics "$dir/tp.jsonl" --save "$dir/tp.bin" --memory-json "$dir/tp.mem.json" \
  $profile_args $device_args > "$dir/tp.out" 2>&1 || { cat "$dir/tp.out"; exit 1; }
cat "$dir/tp.out"

field() { sed -n "s/.*\"$1\": *\([^,]*\),.*/\1/p" "$2"; }
fail=0
if [ "$compute" != fp32 ] && ! grep -q "16-bit compute: products and their activations in $compute" "$dir/tp.out"; then
  echo "FAIL: the parallel run did not compute in $compute"; fail=1
fi
for f in loss grad_norm; do
  field "$f" "$dir/ref.jsonl" > "$dir/ref.$f"
  field "$f" "$dir/tp.jsonl" > "$dir/tp.$f"
  paste "$dir/ref.$f" "$dir/tp.$f" | awk -v tol="$tol" -v what="$f" '
    function abs(v) { return v < 0 ? -v : v }
    { n++; d = abs($1 - $2); r = d / abs($1);
      printf "step %d: reference %s %.9f, parallel %.9f, abs err %.3g, rel err %.3g\n", n, what, $1, $2, d, r;
      if (d > max_abs) max_abs = d; if (r > max_rel) max_rel = r }
    END {
      printf "%s: max abs err %.3g, max rel err %.3g over %d steps (tolerance %g relative)\n", what, max_abs, max_rel, n, tol;
      if (n != 10) { print "FAIL: expected 10 steps from each run"; exit 1 }
      if (max_rel > tol) { print "FAIL: " what " differs beyond the tolerance"; exit 1 } }' || fail=1
done
param_tol=${TZ_PARAM_TOL:-$tol}
"$check" checkpoints "$dir/ref.bin" "$dir/tp.bin" "$param_tol" "$param_tol" || fail=1
# The parallel layout loads a model file by range (each rank only its pieces) and saves it back
# piece by piece: with no step between, the file must come back bit for bit. Messages of 1000
# elements to rank 0, so the save's chunking and pacing are exercised (the default is 4M).
if TIERZERO_TEST_SAVE_CHUNK_ELEMS=1000 timeout -k 5 120 "$@" -n "$ranks" -x TIERZERO_TEST_SAVE_CHUNK_ELEMS \
    "$tierzero" train --config "$dir/tp.json" --steps 0 \
    --load "$dir/ref.bin" --save "$dir/round.bin" $device_args > "$dir/round.out" 2>&1 &&
    cmp "$dir/ref.bin" "$dir/round.bin"; then
  echo "load and save by range on the parallel layout: the file came back bit for bit"
else
  cat "$dir/round.out"; echo "FAIL: --load then --save on the parallel layout changed the model"; fail=1
fi
if [ "$stage" -eq 0 ]; then
  "$check" param-ratio "$dir/ref.mem.json" "$dir/tp.mem.json" "$ratio" || fail=1
else
  "$check" param-ratio "$dir/ref.mem.json" "$dir/tp.mem.json" 1e9 || fail=1
fi
# The gradient variant must really keep every rank's gradient shards on NVMe (a setting that did
# not reach the store would train alike with them on the host).
if [ -n "$grads" ]; then
  python3 - "$dir/tp.mem.json" "$ranks" <<'PY' || fail=1
import json, sys
path, ranks = sys.argv[1], int(sys.argv[2])
for r in range(ranks):
    tiers = json.load(open(path if r == 0 else f"{path}.rank{r}"))["tiers"]
    nvme, host = tiers["nvme"]["grad"]["current"], tiers["host"]["grad"]["current"]
    print(f"rank {r}: gradient shards on nvme {nvme} bytes, host {host} bytes")
    if nvme == 0 or host != 0:
        print("FAIL: the gradient shards are not on NVMe"); sys.exit(1)
PY
fi
if [ "$ulysses" -gt 1 ]; then
  "$check" ulysses-activations "$dir/ref.mem.json" "$dir/tp.mem.json" "$ranks" \
    "${TZ_ULYSSES_ACTIVATION_RATIO:-1}" || fail=1
fi
if [ "$tp" -gt 1 ] || [ "$ulysses" -gt 1 ]; then
  "$check" collective-bytes "$dir/tp.jsonl" "$dir/tp.prof.json" || fail=1
fi
if [ "$pp" -gt 1 ]; then
  "$check" pipeline-activations "$dir/tp.mem.json" "$ranks" || fail=1
  "$check" pipeline-profile "$dir/tp.mem.json" "$dir/tp.prof.json" "$ranks" || fail=1
fi
[ $fail -eq 0 ] && echo "run_tp_match: OK"
exit $fail
