#!/bin/sh
# tierzero.optimizer_overlap with gradient clipping (and fp16 loss scaling) end to end: the same
# `tierzero train` run (two micro-batches per step, a training checkpoint every 2 steps, the model
# saved at the end) in the reference order (off), with plain (which then takes each unit's share
# of the gradient norm during the backward and updates after it) and with speculative (which
# updates during the backward as if clipping did not bind, and undoes and redoes the units at the
# step where it does, or skips on an fp16 overflow). gradient_clipping is chosen from a probe run
# without clipping (steps before the first one that clips follow the same path with or without
# it): above step 1's norm, so step 1 does not clip, and below the largest later norm, so a later
# step does; fp16 takes a clip above every norm, its redone steps being the overflows. The test
# asserts both kinds of step happened (speculative's opt_redone_units), and for fp16 that a step
# overflowed. Per-step losses and gradient norms
# (full precision), the saved model and every checkpoint file must be bit-identical across the
# three modes. Prints every step's figures and the max difference.
# usage: run_optimizer_speculative.sh <tierzero> <ranks> <stage> <variant> <mpiexec command...>
# variant: opt_host (optimizer on the host), opt_nvme, all_nvme (params and optimizer on NVMe),
# fp16_host (16-bit working parameters with dynamic loss scaling that overflows, optimizer on
# the host).
tierzero=$1; ranks=$2; stage=$3; variant=$4; shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

nvme='{"device": "nvme", "nvme_path": "'"$dir"'", "buffer_size": 3000}'
pnvme='{"device": "nvme", "nvme_path": "'"$dir"'"}'
offload=""; precision=""; overflow=0
case "$variant" in
  opt_host) offload=', "offload_optimizer": {"device": "cpu"}' ;;
  opt_nvme) offload=", \"offload_optimizer\": $nvme" ;;
  all_nvme) offload=", \"offload_param\": $pnvme, \"offload_optimizer\": $nvme" ;;
  fp16_host) offload=', "offload_optimizer": {"device": "cpu"}'
             precision='"fp16": {"enabled": true, "initial_scale_power": 63, "hysteresis": 1, "loss_scale_window": 2},'
             overflow=1 ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac
config() {
cat <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "gradient_clipping": $1, $precision
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0,
                       "reduce_bucket_size": 2000 $offload},
 "tierzero": {"steps": 6, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
}

# The probe: the reference order without clipping.
config 0 > "$dir/probe.json"
timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$dir/probe.json" \
  --optimizer-overlap off --metrics "$dir/probe.jsonl" > "$dir/probe.out" 2>&1 ||
  { cat "$dir/probe.out"; echo "FAIL: the probe run failed"; exit 1; }
clip=$(python3 - "$dir/probe.jsonl" "$overflow" <<'PY'
import json, math, re, sys
norms = []
for line in open(sys.argv[1]):
    text = re.search(r'"grad_norm": *([^,}]*)', line).group(1)
    try:
        norms.append(float(text))
    except ValueError:
        norms.append(float("nan"))
finite = [n for n in norms if math.isfinite(n)]
if sys.argv[2] == "1":
    print(f"{2 * max(finite):.6g}")  # never binds: the overflows are the redone steps
else:
    later = max(norms[1:])
    print(f"{(norms[0] + later) / 2:.6g}" if later > norms[0] * 1.01 else "none")
PY
)
echo "probe (no clipping) gradient norms: $(sed -n 's/.*"grad_norm": *\([^,}]*\).*/\1/p' "$dir/probe.jsonl" | tr '\n' ' '); gradient_clipping $clip"
[ "$clip" != none ] || { echo "FAIL: no later step's norm exceeds step 1's: pick another seed"; exit 1; }
config "$clip" > "$dir/train.json"
echo "variant $variant, $ranks rank(s), stage $stage: $(cat "$dir/train.json")"

for mode in off plain speculative; do
  mkdir -p "$dir/$mode"
  echo "optimizer_overlap $mode"
  timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$dir/train.json" \
    --optimizer-overlap "$mode" --metrics "$dir/$mode.jsonl" --save "$dir/$mode/model.bin" \
    --save-dir "$dir/$mode/ckpt" --save-every 2 > "$dir/$mode.out" 2>&1
  rc=$?
  cat "$dir/$mode.out"
  [ $rc -eq 0 ] || { echo "FAIL: the $mode run exited with $rc"; exit 1; }
done

python3 - "$dir" "$clip" "$overflow" <<'PY' || exit 1
import json, os, re, sys, filecmp
d, clip, overflow = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
modes = ("off", "plain", "speculative")
def parse(line):
    # The gradient norm as written (an overflowed step's may not be finite): compared as text.
    norm = re.search(r'"grad_norm": *([^,}]*)', line).group(1)
    rec = json.loads(re.sub(r'"grad_norm": *[^,}]*', '"grad_norm": 0', line))
    rec["grad_norm_text"] = norm
    return rec
runs = {m: [parse(l) for l in open(f"{d}/{m}.jsonl")] for m in modes}
ok = all(len(runs[m]) == 6 for m in modes)
worst = 0.0
kept = redone = skipped = 0
for i, a in enumerate(runs["off"]):
    p, s = runs["plain"][i], runs["speculative"][i]
    diff = max(abs(a["loss"] - p["loss"]), abs(a["loss"] - s["loss"]))
    worst = max(worst, diff)
    same_norm = a["grad_norm_text"] == p["grad_norm_text"] == s["grad_norm_text"]
    try:
        norm = float(a["grad_norm_text"])
    except ValueError:
        norm = float("nan")
    binds = norm == norm and norm != float("inf") and clip / (norm + 1e-6) < 1.0
    step_skipped = norm != norm or norm == float("inf")
    if s["opt_redone_units"] > 0:
        redone += 1
        skipped += step_skipped
    elif s["opt_overlapped_units"] > 0:
        kept += 1
    print(f"step {a['step']}: loss off {a['loss']!r} plain {p['loss']!r} speculative "
          f"{s['loss']!r}; grad norm {a['grad_norm_text']} (plain {p['grad_norm_text']}, "
          f"speculative {s['grad_norm_text']}), clipping {'binds' if binds else 'does not bind'}"
          f"{', skipped' if step_skipped else ''}; speculative: {s['opt_overlapped_units']} units "
          f"during the backward, {s['opt_redone_units']} redone, {s['opt_unbacked_units']} "
          f"without room for a backup, worker {s['opt_worker_ms']:.2f} ms "
          f"({s['opt_overlapped_ms']:.2f} hidden), exposed {s['opt_exposed_ms']:.2f} ms; plain "
          f"worker {p['opt_worker_ms']:.2f} ms, exposed {p['opt_exposed_ms']:.2f} ms; off exposed "
          f"{a['opt_exposed_ms']:.2f} ms")
    if not same_norm:
        print(f"FAIL: step {a['step']}: the gradient norms differ"); ok = False
    if (binds or step_skipped) != (s["opt_redone_units"] > 0) and s["opt_overlapped_units"] > 0:
        print(f"FAIL: step {a['step']}: speculative redid {s['opt_redone_units']} units where "
              f"clipping {'binds' if binds else 'does not bind'}"); ok = False
print(f"max loss difference {worst!r} over {len(runs['off'])} steps; speculative kept its "
      f"updates on {kept} step(s), redid them on {redone} ({skipped} skipped on overflow)")
ok = ok and worst == 0.0
for m in ("off", "plain"):
    if any(r["opt_overlapped_units"] != 0 or r["opt_redone_units"] != 0 for r in runs[m]):
        print(f"FAIL: {m} updated units during the backward of a step with clipping"); ok = False
if kept == 0 or redone == 0:
    print("FAIL: the run should have steps where clipping binds and steps where it does not "
          "(change gradient_clipping in this script)"); ok = False
if overflow and skipped == 0:
    print("FAIL: no fp16 overflow step was undone"); ok = False
# The saved model and every checkpoint file, byte for byte.
def flat(v, at=""):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            out.update(flat(x, f"{at}.{k}" if at else k))
        return out
    return {at: v}
def same(f, mode):
    a, b = f"{d}/off/{f}", f"{d}/{mode}/{f}"
    if not os.path.exists(b): return False
    if filecmp.cmp(a, b, shallow=False): return True
    if not f.endswith(".json"): return False
    # A manifest names its run and its settings: those may differ (the setting under test),
    # every other field may not.
    x, y = flat(json.load(open(a))), flat(json.load(open(b)))
    keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
    allowed = [k for k in keys if "optimizer_overlap" in k or k.endswith("run_id")
               or k.endswith("_at_ns")]
    if keys != allowed:
        print(f"{mode}/{f}: fields that differ: {[(k, x.get(k), y.get(k)) for k in keys]}")
    return keys == allowed
files = []
for root, _, names in os.walk(f"{d}/off"):
    files += [os.path.relpath(os.path.join(root, n), f"{d}/off") for n in names]
for mode in ("plain", "speculative"):
    differ = [f for f in sorted(files) if not same(f, mode)]
    print(f"{mode}: {len(files)} saved files compared with off, {len(differ)} differ: {differ}")
    if differ or "model.bin" not in files:
        ok = False
print("run_optimizer_speculative: OK" if ok else "FAIL: a run differs from the reference order")
sys.exit(0 if ok else 1)
PY
