#!/bin/sh
# The planner's step time against a measured run (issue 19): plan a small GPT on one CPU thread
# (rates from the quick measurement), train the written config for 1 warm-up + 6 steps, and hold
# |predicted - measured| / measured to TOLERANCE. Both sides are taken as on an idle machine:
# the calibration and each step count the lower of wall time and CPU time per thread (a shared
# machine's other processes stretch the wall time, not the CPU time), so the check does not
# depend on the load. The wall-time error is printed too, not held. Then `plan --check` must print
# its own comparison, within the same tolerance.
# usage: run_plan_time.sh <tierzero>
tierzero=$1
TOLERANCE=0.45  # plan_report.cpp's kValidatedTimeError; seen: -11% to +2% on a loaded 2-core
# AMD EPYC VM, -8% to -38% on an Intel Xeon one (the GEMM rate is measured on a 2048^3 product)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model="--layers 4 --heads 4 --channels 256 --vocab 257 --context 64 --seq 64 --global-batch 8"
# shellcheck disable=SC2086
"$tierzero" plan $model --device-mem 4GiB --host-mem 4GiB --threads 1 -o "$dir/plan.json" \
  > "$dir/plan.txt" || { cat "$dir/plan.txt"; exit 1; }
cat "$dir/plan.txt"
timeout -k 5 240 "$tierzero" train --config "$dir/plan.json" --steps 7 --threads 1 \
  --metrics "$dir/metrics.jsonl" > "$dir/train.log" 2>&1 ||
  { tail -20 "$dir/train.log"; echo "run_plan_time: the planned config did not run"; exit 1; }
# shellcheck disable=SC2086
timeout -k 5 240 "$tierzero" plan $model --device-mem 4GiB --host-mem 4GiB --threads 1 \
  --check --check-steps 4 > "$dir/check.txt" 2>&1 || { cat "$dir/check.txt"; exit 1; }
grep '^check' "$dir/check.txt"
python3 - "$dir/plan.txt" "$dir/metrics.jsonl" "$dir/check.txt" "$TOLERANCE" <<'PY'
import json, re, statistics, sys
plan, metrics, check, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
m = re.search(r"predicted step ([0-9.]+) ms", open(plan).read())
if not m:
    sys.exit("run_plan_time: no predicted step time in the plan's output")
predicted = float(m.group(1))
steps = [json.loads(line) for line in open(metrics)]
if len(steps) != 7:
    sys.exit(f"run_plan_time: {len(steps)} metrics lines, expected 7")
after = steps[1:]  # the first step allocates and warms up
idle = statistics.median(min(s["ms"], s["cpu_ms"]) for s in after)
wall = statistics.median(s["ms"] for s in after)
err = (predicted - idle) / idle
print(f"run_plan_time: predicted {predicted:.1f} ms, measured {idle:.1f} ms (median of "
      f"{len(after)} steps, lower of wall and CPU time): error {100 * err:+.1f}% "
      f"(tolerance {100 * tol:.0f}%); wall median {wall:.1f} ms, wall error "
      f"{100 * (predicted - wall) / wall:+.1f}% (not held: the machine is shared)")
c = re.search(r"predicted ([0-9.]+) ms vs measured ([0-9.]+) ms.*error ([-+0-9.]+)%",
              open(check).read())
if not c:
    sys.exit("run_plan_time: plan --check printed no comparison")
check_err = float(c.group(3)) / 100
print(f"run_plan_time: plan --check: error {100 * check_err:+.1f}%")
ok = abs(err) <= tol and abs(check_err) <= tol
print("run_plan_time: OK" if ok else "run_plan_time: FAILED")
sys.exit(0 if ok else 1)
PY
