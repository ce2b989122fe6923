#!/bin/sh
# A report from a real run, end to end: `tierzero train` on 2 ranks (mpiexec) at stage 3 with
# parameters and optimizer states on NVMe writes its profile with the fine-grained timeline;
# `tierzero report` turns rank 0's into HTML and a trace. The trace must hold every track and the
# memory counters; the profile must carry the prefetch counters and the estimator's prediction;
# where Chromium is installed the page must render without a script error.
# usage: run_real_report.sh <tierzero> <mpiexec and args...>
tierzero=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "offload_param": {"device": "nvme", "nvme_path": "$dir"},
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir"}},
 "tierzero": {"steps": 4, "seq_len": 16, "threads": 1, "val_batches": 2,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
timeout -k 5 120 "$@" -n 2 "$tierzero" train --config "$dir/c.json" --profile "$dir/p.json" \
  --profile-timeline || { echo "FAIL: train"; exit 1; }
[ -s "$dir/p.json" ] && [ -s "$dir/p.json.rank1" ] || { echo "FAIL: a rank wrote no profile"; exit 1; }
timeout -k 5 60 "$tierzero" report "$dir/p.json" -o "$dir/r.html" --trace "$dir/t.json" ||
  { echo "FAIL: report"; exit 1; }
for track in compute collective host_to_device device_to_host nvme_read nvme_write optimizer stall; do
  grep -q "\"$track\"" "$dir/t.json" || { echo "FAIL: the trace has no $track track"; exit 1; }
done
grep -q '"ph": *"C"' "$dir/t.json" || grep -q '"ph":"C"' "$dir/t.json" ||
  { echo "FAIL: the trace has no memory counters"; exit 1; }
for key in prefetch_hits on_demand_fetches predicted placements; do
  grep -q "\"$key\"" "$dir/p.json" || { echo "FAIL: the profile has no $key"; exit 1; }
done
for c in chromium chromium-browser; do command -v $c >/dev/null 2>&1 && browser=$c && break; done
if [ -n "$browser" ]; then
  timeout -k 5 60 $browser --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$dir/chromium" --dump-dom "file://$dir/r.html" > "$dir/dom.html" 2>/dev/null
  grep -q 'data-rendered="ok"' "$dir/dom.html" || { echo "FAIL: the page did not render"; exit 1; }
  if grep -q 'data-error="' "$dir/dom.html"; then echo "FAIL: a script error"; exit 1; fi
  echo "chromium rendered the report"
else
  echo "chromium is not installed: rendering not checked (scripts/setup.sh installs it)"
fi
echo "run_real_report: OK"
