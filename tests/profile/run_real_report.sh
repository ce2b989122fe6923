#!/bin/sh
# A report from real runs, end to end: `tierzero train` on 2 ranks (mpiexec) at stage 3 with
# parameters and optimizer states on NVMe writes every rank's profile with the fine-grained
# timeline; `tierzero report` turns them into one HTML page and a trace. The trace must hold
# every track and the memory counters; the profile must carry the prefetch counters and the
# estimator's prediction; rank_report_check compares each rank's figures in the page with that
# rank's own profile and finds every rank in the trace; where Chromium is installed the page
# must render without a script error. Then a 4-rank run the same way, and the errors: profiles
# of two runs given together, and a damaged profile.
# usage: run_real_report.sh <tierzero> <rank_report_check> <mpiexec and args...>
tierzero=$1; shift
check=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config() {  # config <file> <zero_optimization extras>
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0 $2},
 "tierzero": {"steps": 4, "seq_len": 16, "threads": 1, "val_batches": 2,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
}
config "$dir/c.json" ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\"},
   \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\"}"
timeout -k 5 120 "$@" -n 2 "$tierzero" train --config "$dir/c.json" --profile "$dir/p.json" \
  --profile-timeline || { echo "FAIL: train"; exit 1; }
[ -s "$dir/p.json" ] && [ -s "$dir/p.json.rank1" ] || { echo "FAIL: a rank wrote no profile"; exit 1; }
timeout -k 5 60 "$tierzero" report "$dir/p.json" -o "$dir/r.html" --trace "$dir/t.json" \
  2> "$dir/report.log" || { cat "$dir/report.log"; echo "FAIL: report"; exit 1; }
cat "$dir/report.log"
grep -q "2 rank(s) of 2" "$dir/report.log" || { echo "FAIL: the report did not take both ranks"; exit 1; }
for track in compute collective host_to_device device_to_host nvme_read nvme_write optimizer stall; do
  grep -q "\"$track\"" "$dir/t.json" || { echo "FAIL: the trace has no $track track"; exit 1; }
done
grep -q '"ph": *"C"' "$dir/t.json" || grep -q '"ph":"C"' "$dir/t.json" ||
  { echo "FAIL: the trace has no memory counters"; exit 1; }
# The device's compute as the device timeline timed it: each module's forward and backward a
# span of the compute track in every step (2 blocks, embeddings, final norm, head: 10 at least).
python3 - "$dir/p.json" <<'PY' || exit 1
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
counts = [s["tracks"][0][2] for s in steps]
print("device timeline: compute spans per step", counts)
if min(counts) < 10:
    print("FAIL: the compute track lacks the device timeline's spans"); sys.exit(1)
PY
for key in prefetch_hits on_demand_fetches predicted placements run_id; do
  grep -q "\"$key\"" "$dir/p.json" || { echo "FAIL: the profile has no $key"; exit 1; }
done
"$check" "$dir/r.html" "$dir/t.json" "$dir/p.json" "$dir/p.json.rank1" ||
  { echo "FAIL: the 2-rank report's figures"; exit 1; }
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

# 4 ranks (device tier only, to keep it short), reported from their directory.
mkdir "$dir/four"
config "$dir/c4.json" ""
timeout -k 5 180 "$@" -n 4 "$tierzero" train --config "$dir/c4.json" \
  --profile "$dir/four/q.json" --profile-timeline || { echo "FAIL: train on 4 ranks"; exit 1; }
timeout -k 5 60 "$tierzero" report "$dir/four" -o "$dir/r4.html" --trace "$dir/t4.json" ||
  { echo "FAIL: report over 4 ranks"; exit 1; }
"$check" "$dir/r4.html" "$dir/t4.json" "$dir/four/q.json" "$dir/four/q.json.rank1" \
  "$dir/four/q.json.rank2" "$dir/four/q.json.rank3" || { echo "FAIL: the 4-rank report's figures"; exit 1; }

# Profiles of two runs together: an error naming the file that does not belong.
if "$tierzero" report "$dir/p.json" "$dir/four/q.json.rank1" -o "$dir/bad.html" 2> "$dir/err.log"; then
  echo "FAIL: profiles of two runs were accepted"; exit 1
fi
cat "$dir/err.log"
grep -q "q.json.rank1.*not of the same run" "$dir/err.log" || { echo "FAIL: unclear mixed-run error"; exit 1; }
# A damaged profile: an error naming it.
head -c 200 "$dir/four/q.json.rank2" > "$dir/four/q.json.rank2.cut" && mv "$dir/four/q.json.rank2.cut" "$dir/four/q.json.rank2"
if "$tierzero" report "$dir/four/q.json" -o "$dir/bad.html" 2> "$dir/err.log"; then
  echo "FAIL: a damaged profile was accepted"; exit 1
fi
cat "$dir/err.log"
grep -q "q.json.rank2' is not valid JSON" "$dir/err.log" || { echo "FAIL: unclear damaged-profile error"; exit 1; }
[ ! -e "$dir/bad.html" ] || { echo "FAIL: a failed report wrote a page"; exit 1; }
echo "run_real_report: OK"
