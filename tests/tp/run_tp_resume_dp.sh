#!/bin/sh
# Resuming a tensor-parallel checkpoint into another data-parallel layout: tp 2 x dp 2 at ZeRO-3
# trains 4 steps, saving after step 2; tp 2 x dp 1 (micro-batch doubled: the same global batch)
# resumes from step 2, reading its state by range from every writer rank's blocks of its own tp
# piece (the tp ranks' units have the same names; reading tp rank 0's pieces on both ranks diverged
# at once: loss 5.441 against 5.411 at step 3). Steps 3 and 4 must match the uninterrupted run
# within 1e-6 relative (the reductions' order differs, so not bitwise).
# usage: run_tp_resume_dp.sh <tierzero> <mpiexec command...>
tierzero=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
 "tierzero": {"steps": 4, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "tensor_parallel": 2,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 16}}}
JSON
sed 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4/' "$dir/run.json" > "$dir/dp1.json"
timeout -k 5 200 "$@" -n 4 "$tierzero" train --config "$dir/run.json" --save-dir "$dir/ck" \
  --save-every 2 --metrics "$dir/full.jsonl" > "$dir/full.out" 2>&1 || { cat "$dir/full.out"; exit 1; }
timeout -k 5 200 "$@" -n 2 "$tierzero" train --config "$dir/dp1.json" \
  --resume "$dir/ck/step-00000002" --metrics "$dir/resumed.jsonl" > "$dir/resumed.out" 2>&1 ||
  { cat "$dir/resumed.out"; exit 1; }
grep "resharded" "$dir/resumed.out" | head -1
python3 - "$dir/full.jsonl" "$dir/resumed.jsonl" <<'PY'
import json, sys
full, resumed = ({json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"loss"' in l}
                 for p in sys.argv[1:])
bad = 0
for step in (3, 4):
    a, b = full.get(step), resumed.get(step)
    rel = abs(a - b) / abs(a) if a is not None and b is not None else float("inf")
    print(f"  step {step}: uninterrupted {a}, resumed at dp 1 {b}, relative difference {rel:.3g} (bound 1e-6)")
    bad += rel > 1e-6
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] && echo "run_tp_resume_dp: OK" && exit 0
echo "FAIL: the resumed run differs"; exit 1
