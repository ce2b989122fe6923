#!/bin/sh
# Oversize training on the CPU backend: a 24-layer, 256-channel GPT (about 19M parameters, so
# about 300 MB of fp32 training state: params, grads, Adam m and v) trains 3 steps at ZeRO stage 3
# with parameters and optimizer states offloaded to <tier> (cpu or nvme) under a device budget of
# 36 MiB — less than an eighth of the state. The device allocator's budget is a hard limit (a
# request beyond it is an Error), and the --memory-json file proves it from the tracker: the
# device peak is within the budget and the model state held off the device is at least 8x it.
# usage: run_oversize.sh <tierzero> <cpu|nvme>
tierzero=$1; tier=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
budget_mib=36
if [ "$tier" = nvme ]; then where="{\"device\": \"nvme\", \"nvme_path\": \"$dir\"}"; else where='{"device": "cpu"}'; fi
cat > "$dir/oversize.json" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                       "stage3_max_live_parameters": 1700000,
                       "stage3_prefetch_bucket_size": 800000,
                       "reduce_bucket_size": 1000000,
                       "offload_param": $where, "offload_optimizer": $where},
 "tierzero": {"steps": 3, "seq_len": 32, "val_batches": 1, "activation_checkpointing": true,
              "model": {"vocab_size": 257, "n_layer": 24, "n_head": 4, "n_embd": 256,
                        "context_length": 32}}}
JSON
cat "$dir/oversize.json"
timeout -k 5 240 "$tierzero" train --config "$dir/oversize.json" \
  --device-mem "${budget_mib}MiB" \
  --memory-json "$dir/mem.json" || exit 1
cat "$dir/mem.json"
# "tier_peaks": {"device": p, ...} is the tracker's peak of each tier's sum over categories, the
# bytes the budget limits; "tier": {"param": {"current": c, "peak": p}, ...} gives the model
# state held in each tier. (The sum of the category peaks, printed beside it, is only an upper
# bound: the categories peak at different times.)
awk -v budget=$((budget_mib * 1048576)) '
  { s = $0; gsub(/[ \t]/, "", s)  # compact, for any spacing of the JSON
    while (match(s, /"(device|host|nvme)":\{/)) {
      tier = substr(s, RSTART + 1, RLENGTH - 4); s = substr(s, RSTART + RLENGTH)
      block = s; sub(/\}\}.*/, "", block)
      n = split(block, parts, /"[a-z]+":\{"current":/)
      for (i = 2; i <= n; i++) { split(parts[i], v, /[,}]/); cur = v[1];
        match(parts[i], /"peak":[0-9]+/); pk = substr(parts[i], RSTART + 7, RLENGTH - 7)
        peak_sum[tier] += pk; if (i <= 4) state[tier] += cur } }
    s = $0; gsub(/[ \t]/, "", s)
    if (match(s, /"tier_peaks":\{"device":[0-9]+/)) device_peak = substr(s, RSTART + 23, RLENGTH - 23) + 0 }
  END {
    printf "device peak %d bytes (sum of category peaks %d), budget %d\n", device_peak,
           peak_sum["device"], budget
    off = state["host"] + state["nvme"]
    printf "model state off the device %d bytes = %.1fx the device budget\n", off, off / budget
    if (device_peak == 0) { print "FAIL: no tier_peaks in the memory report"; exit 1 }
    if (device_peak > budget) { print "FAIL: device budget exceeded"; exit 1 }
    if (off < 8 * budget) { print "FAIL: the training state is not 8x the device budget"; exit 1 }
    print "run_oversize: OK" }' "$dir/mem.json"
