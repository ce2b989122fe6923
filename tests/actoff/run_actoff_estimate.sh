#!/bin/sh
# The estimator against the tracker with the block checkpoints on each tier (issue 31): for one
# rank, tp 2 with Megatron sequence parallelism, pp 2 (1F1B, 4 micro-batches; and interleaved
# with receives posted ahead into a third checkpoint slot), `tierzero
# estimate --json` of the run's config must give exactly the measured device peaks of
# Category::activation and ::activation_checkpoint (the rank with the most), and exactly the
# measured host and NVMe peaks of ::activation_checkpoint (the rank that stores the most: a copy
# and an NVMe extent are taken when the forward hands the checkpoint over and freed when the
# backward is done with it, so the peak is the most checkpoints stored at once).
# usage: run_actoff_estimate.sh <tierzero> <mpiexec command...>
tierzero=$1; shift
MPI="$*"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
for layout in one tp2 pp2 pp2il; do
  ranks=2; extra=""; slots=2
  case $layout in
    one) ranks=1 ;;
    tp2) extra='"tensor_parallel": 2, "sequence_parallel": true,' ;;
    pp2) extra='"pipeline_parallel": 2,' ;;
    pp2il) slots=3; extra='"pipeline_parallel": 2, "pipeline_schedule": "interleaved",
              "pipeline_virtual_stages": 2, "pipeline_receive_ahead": true,' ;;
  esac
  for tier in device cpu nvme; do
    cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
 "tierzero": {"steps": 2, "seq_len": 32, "seed": 7, "threads": 1, "val_batches": 0, $extra
              "activation_checkpointing": true,
              "activation_checkpoints": {"device": "$tier", "nvme_path": "$dir", "buffer_count": $slots},
              "model": {"vocab_size": 257, "n_layer": 6, "n_head": 4, "n_embd": 64,
                        "context_length": 32}}}
JSON
    launch=""
    [ "$ranks" -gt 1 ] && launch="$MPI -n $ranks"
    "$tierzero" estimate --config "$dir/run.json" --json > "$dir/est.json" || { fail=1; continue; }
    rm -f "$dir"/mem.json*
    timeout -k 5 240 $launch "$tierzero" train --config "$dir/run.json" \
      --memory-json "$dir/mem.json" > "$dir/train.out" 2>&1 || { cat "$dir/train.out"; fail=1; continue; }
    python3 - "$layout" "$tier" "$dir/est.json" "$dir"/mem.json* <<'PY' || fail=1
import json, sys
layout, tier, est = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
ranks = [json.load(open(p))["tiers"] for p in sys.argv[4:]]
def est_at(t, c):
    return est["buffers"].get(t, {}).get(c, 0)
def peak(r, t, c):
    return r[t][c]["peak"]
# The rank whose device activations (with the checkpoints' slots) are largest: the estimate's.
worst = max(ranks, key=lambda r: peak(r, "device", "activation") + peak(r, "device", "activation_checkpoint"))
ok = True
for c in ("activation", "activation_checkpoint"):
    m, e = peak(worst, "device", c), est_at("device", c)
    print(f"{layout} {tier}: device {c} measured {m} estimated {e}")
    ok &= m == e
for t in ("host", "nvme"):
    m = max(peak(r, t, "activation_checkpoint") for r in ranks)
    e = est_at(t, "activation_checkpoint")
    print(f"{layout} {tier}: {t} activation_checkpoint measured {m} estimated {e} (error {m - e} B)")
    ok &= m == e
if not ok:
    print(f"FAIL: {layout} {tier}")
sys.exit(0 if ok else 1)
PY
  done
done
[ "$fail" -eq 0 ] && echo "run_actoff_estimate: OK"
exit "$fail"
