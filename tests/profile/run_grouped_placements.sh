#!/bin/sh
# The profile's placement rows with blocks_per_unit 2: the store joins two blocks into one unit,
# so each block's row must show its store unit's tiers (the rows are per model unit, the store's
# placements per store unit). With half the optimizer states offloaded, block.0 and block.1 (one
# store unit) must agree, and so must block.2 and block.3, and every row must name a real tier.
# usage: run_grouped_placements.sh <tierzero> <mpiexec and args...>
tierzero=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/c.json" <<JSON
{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}},
 "tierzero": {"steps": 2, "seq_len": 16, "threads": 1, "val_batches": 1, "blocks_per_unit": 2,
              "model": {"vocab_size": 257, "n_layer": 4, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
timeout -k 5 120 "$@" -n 2 "$tierzero" train --config "$dir/c.json" --profile "$dir/p.json" \
  > "$dir/out" 2>&1 || { cat "$dir/out"; echo "FAIL: train"; exit 1; }
# One line per row: unit param grad optimizer.
tr '{' '\n' < "$dir/p.json" | sed -n 's/.*"grad": *"\([a-z]*\)".*"optimizer": *"\([a-z]*\)".*"param": *"\([a-z]*\)".*"unit": *"\([a-z_.0-9]*\)".*/\4 \3 \1 \2/p' > "$dir/rows"
cat "$dir/rows"
[ "$(wc -l < "$dir/rows")" -eq 6 ] || { echo "FAIL: expected 6 placement rows"; exit 1; }
row() { grep "^$1 " "$dir/rows" | cut -d' ' -f2-; }
[ "$(row block.0)" = "$(row block.1)" ] || { echo "FAIL: block.0 and block.1 share a store unit"; exit 1; }
[ "$(row block.2)" = "$(row block.3)" ] || { echo "FAIL: block.2 and block.3 share a store unit"; exit 1; }
if grep -vqE "^[a-z_.0-9]+ (device|host|nvme) (device|host|nvme) (device|host|nvme)$" "$dir/rows"; then
  echo "FAIL: a row names no tier"; exit 1
fi
grep -q " host$" "$dir/rows" && grep -q " device$" "$dir/rows" ||
  { echo "FAIL: expected optimizer states on both tiers at ratio 0.5"; exit 1; }
echo "run_grouped_placements: OK"
