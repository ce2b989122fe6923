#!/bin/sh
# The Llama-family modules (RMSNorm, rotary positions with Llama 3 scaling, SwiGLU, grouped-query
# attention with 4 heads over 2 kv heads, untied head) trained by the real binary on <ranks>
# ranks in <mode> against one rank at stage 0 (micro-batch 2 x dp, so both see the same tokens
# per step): every one of 10 steps' loss and gradient norm must agree within <tol> relative.
# Modes: tp2 (tensor parallel 2 with Megatron sequence parallelism, ZeRO-1), pp2 (two pipeline
# stages, 1F1B, 2 micro-batches, ZeRO-0), ulysses2 (Ulysses 2, ZeRO-2), zero3_nvme (2 data-parallel
# ranks, ZeRO-3 with parameters and optimizer states on NVMe), zero3_host_ckpt (the same in
# pinned host memory, with activation checkpointing), tp4_refused (tp 4 over 2 kv heads
# must fail with a clear message), resume_zero3_nvme (the zero3_nvme run checkpointed at step 5 and
# resumed: steps 6-10 bit-identical to the uninterrupted run's).
# TZ_COMPUTE (bf16 or fp16): both runs with those working parameters and 16-bit compute
# (tierzero.compute_dtype: RMSNorm, rotary positions, SwiGLU and the grouped attention in 16
# bits), the parallel run against the one-rank run in the same compute; both must say so.
# usage: run_llama_match.sh <tierzero> <mode> <tol> <mpiexec command...>
tierzero=$1; mode=$2; tol=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ranks=2; tp=1; sp=false; pp=1; ulysses=1; stage=0; micro=1; offload=""; ckpt=false
case "$mode" in
  tp2) tp=2; sp=true; stage=1 ;;
  pp2) pp=2; micro=2 ;;
  ulysses2) ulysses=2; stage=2 ;;
  zero3_nvme) stage=3
    offload=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\"}, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_size\": 30000}" ;;
  zero3_host_ckpt) stage=3; ckpt=true
    offload=", \"offload_param\": {\"device\": \"cpu\"}, \"offload_optimizer\": {\"device\": \"cpu\"}" ;;
  tp4_refused) ranks=4; tp=4 ;;
  resume_zero3_nvme) stage=3
    offload=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\"}, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_size\": 30000}" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
dp=$((ranks / (tp * pp * ulysses)))
compute=${TZ_COMPUTE:-fp32}; precision_key=""
[ "$compute" != fp32 ] && precision_key="\"$compute\": {\"enabled\": true},"

# write_config <file> <stage> <micro_batch> <offload> <tp> <sp> <pp> <ulysses> <checkpointing>
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $3, "gradient_clipping": 0.5, $precision_key
 "gradient_accumulation_steps": $micro,
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0 $4},
 "tierzero": {"steps": 10, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 2,
              "tensor_parallel": $5, "sequence_parallel": $6, "pipeline_parallel": $7,
              "ulysses_parallel": $8, "activation_checkpointing": $9,
              "compute_dtype": "$compute",
              "model": {"architecture": "llama", "vocab_size": 257, "n_layer": 2, "n_head": 4,
                        "n_embd": 64, "context_length": 16, "num_key_value_heads": 2,
                        "intermediate_size": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                        "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8},
                        "tie_word_embeddings": false}}}
JSON
}
write_config "$dir/ref.json" 0 $((2 * dp)) "" 1 false 1 1 false
write_config "$dir/par.json" "$stage" 2 "$offload" "$tp" "$sp" "$pp" "$ulysses" "$ckpt"

if [ "$mode" = tp4_refused ]; then
  if timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$dir/par.json" \
      > "$dir/par.out" 2>&1; then
    cat "$dir/par.out"; echo "FAIL: tp 4 over 2 kv heads was accepted"; exit 1
  fi
  cat "$dir/par.out"
  grep -q "n_kv_head 2 is not divisible by tensor_parallel 4" "$dir/par.out" ||
    { echo "FAIL: no clear message"; exit 1; }
  echo "run_llama_match: OK"; exit 0
fi

if [ "$mode" = resume_zero3_nvme ]; then
  timeout -k 5 300 "$@" -n "$ranks" "$tierzero" train --config "$dir/par.json" \
    --metrics "$dir/full.jsonl" --save-dir "$dir/ckpt" --save-every 5 || exit 1
  timeout -k 5 300 "$@" -n "$ranks" "$tierzero" train --config "$dir/par.json" \
    --metrics "$dir/resumed.jsonl" --resume "$dir/ckpt/step-00000005" || exit 1
  sed -n 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/p' "$dir/full.jsonl" |
    awk '$1 > 5' > "$dir/full.loss"
  sed -n 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/p' "$dir/resumed.jsonl" |
    awk '$1 > 5' > "$dir/resumed.loss"
  paste "$dir/full.loss" "$dir/resumed.loss"
  if [ "$(wc -l < "$dir/full.loss")" -eq 5 ] && cmp "$dir/full.loss" "$dir/resumed.loss"; then
    echo "run_llama_match: OK (steps 6-10 bit-identical after resume)"; exit 0
  fi
  echo "FAIL: the resumed run differs from the uninterrupted one"; exit 1
fi

echo "reference: one rank, stage 0, micro-batch $((2 * dp))"
timeout -k 5 180 "$tierzero" train --config "$dir/ref.json" --metrics "$dir/ref.jsonl" \
  > "$dir/ref.out" 2>&1 || { cat "$dir/ref.out"; exit 1; }
cat "$dir/ref.out"
echo "parallel: $mode on $ranks ranks (dp $dp, tp $tp, pp $pp, ulysses $ulysses, stage $stage)"
timeout -k 5 300 "$@" -n "$ranks" "$tierzero" train --config "$dir/par.json" \
  --metrics "$dir/par.jsonl" > "$dir/par.out" 2>&1 || { cat "$dir/par.out"; exit 1; }
cat "$dir/par.out"

field() { sed -n "s/.*\"$1\": *\([^,]*\),.*/\1/p" "$2"; }
fail=0
if [ "$compute" != fp32 ]; then
  for run in ref par; do
    grep -q "16-bit compute: products and their activations in $compute" "$dir/$run.out" ||
      { echo "FAIL: the $run run did not compute in $compute"; fail=1; }
  done
fi
for f in loss grad_norm; do
  field "$f" "$dir/ref.jsonl" > "$dir/ref.$f"
  field "$f" "$dir/par.jsonl" > "$dir/par.$f"
  paste "$dir/ref.$f" "$dir/par.$f" | awk -v tol="$tol" -v what="$f" '
    function abs(v) { return v < 0 ? -v : v }
    { n++; d = abs($1 - $2); r = d / abs($1);
      printf "step %d: reference %s %.9f, parallel %.9f, rel err %.3g\n", n, what, $1, $2, r;
      if (r > max_rel) max_rel = r }
    END {
      printf "%s: max rel err %.3g over %d steps (tolerance %g)\n", what, max_rel, n, tol;
      if (n != 10) { print "FAIL: expected 10 steps from each run"; exit 1 }
      if (max_rel > tol) { print "FAIL: " what " differs beyond the tolerance"; exit 1 } }' || fail=1
done
[ $fail -eq 0 ] && echo "run_llama_match: OK"
exit $fail
