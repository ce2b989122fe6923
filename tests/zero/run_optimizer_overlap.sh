#!/bin/sh
# tierzero.optimizer_overlap end to end: the same `tierzero train` run (no gradient clipping, two
# micro-batches per step, a training checkpoint every 2 steps, the model saved at the end) with
# the CPU optimizer updating each unit during the backward (plain) and after it (off, the
# reference order). The per-step losses (full precision), the saved model and every checkpoint
# file must be bit-identical; plain must have updated units during the backward (off: none).
# Prints every step's losses, the max difference and each run's optimizer timings.
# usage: run_optimizer_overlap.sh <tierzero> <ranks> <stage> <variant> <mpiexec command...>
# variant: opt_host (optimizer on the host), opt_nvme, all_nvme (params and optimizer on NVMe),
# nvme_grads (params, optimizer and gradient shards on NVMe), bf16_host (16-bit working
# parameters, optimizer on the host).
tierzero=$1; ranks=$2; stage=$3; variant=$4; shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

nvme='{"device": "nvme", "nvme_path": "'"$dir"'", "buffer_size": 3000}'
pnvme='{"device": "nvme", "nvme_path": "'"$dir"'"}'
offload=""; extra=""; precision=""
case "$variant" in
  opt_host) offload=', "offload_optimizer": {"device": "cpu"}' ;;
  opt_nvme) offload=", \"offload_optimizer\": $nvme" ;;
  all_nvme) offload=", \"offload_param\": $pnvme, \"offload_optimizer\": $nvme" ;;
  nvme_grads) offload=", \"offload_param\": $pnvme, \"offload_optimizer\": $nvme"
              extra='"offload_gradients": "nvme",' ;;
  bf16_host) offload=', "offload_optimizer": {"device": "cpu"}'
             precision='"bf16": {"enabled": true},' ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac
cat > "$dir/train.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "gradient_clipping": 0, $precision
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0,
                       "reduce_bucket_size": 2000 $offload},
 "tierzero": {$extra "steps": 4, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
echo "variant $variant, $ranks rank(s), stage $stage: $(cat "$dir/train.json")"

# A bad value is an error naming the key.
sed 's/"tierzero": {/"tierzero": {"optimizer_overlap": "sometimes",/' "$dir/train.json" > "$dir/bad.json"
if "$tierzero" train --config "$dir/bad.json" > "$dir/bad.out" 2>&1 ||
   ! grep -q "tierzero.optimizer_overlap" "$dir/bad.out"; then
  cat "$dir/bad.out"; echo "FAIL: a bad tierzero.optimizer_overlap is not an error naming the key"
  exit 1
fi
cat "$dir/bad.out"

for mode in off plain; do
  mkdir -p "$dir/$mode"
  echo "optimizer_overlap $mode"
  timeout -k 5 120 "$@" -n "$ranks" "$tierzero" train --config "$dir/train.json" \
    --optimizer-overlap "$mode" --metrics "$dir/$mode.jsonl" --save "$dir/$mode/model.bin" \
    --save-dir "$dir/$mode/ckpt" --save-every 2 > "$dir/$mode.out" 2>&1
  rc=$?
  cat "$dir/$mode.out"
  [ $rc -eq 0 ] || { echo "FAIL: the $mode run exited with $rc"; exit 1; }
done

python3 - "$dir" <<'PY' || exit 1
import json, os, sys, filecmp
d = sys.argv[1]
runs = {m: [json.loads(l) for l in open(f"{d}/{m}.jsonl")] for m in ("off", "plain")}
worst = 0.0
for a, b in zip(runs["off"], runs["plain"]):
    diff = abs(a["loss"] - b["loss"])
    worst = max(worst, diff)
    print(f"step {a['step']}: off loss {a['loss']!r}, plain loss {b['loss']!r}, diff {diff:.3g}; "
          f"plain optimizer: {b['opt_overlapped_units']} units during the backward, worker "
          f"{b['opt_worker_ms']:.2f} ms ({b['opt_overlapped_ms']:.2f} ms hidden), exposed "
          f"{b['opt_exposed_ms']:.2f} ms (off: exposed {a['opt_exposed_ms']:.2f} ms)")
print(f"max loss difference {worst!r} over {len(runs['off'])} steps")
ok = len(runs["off"]) == 4 and len(runs["plain"]) == 4 and worst == 0.0
if any(r["opt_overlapped_units"] != 0 for r in runs["off"]):
    print("FAIL: off updated units during the backward"); ok = False
if any(r["opt_overlapped_units"] == 0 for r in runs["plain"]):
    print("FAIL: plain updated no unit during the backward"); ok = False
# The saved model and every checkpoint file, byte for byte.
files = []
for root, _, names in os.walk(f"{d}/off"):
    files += [os.path.relpath(os.path.join(root, n), f"{d}/off") for n in names]
def flat(v, at=""):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            out.update(flat(x, f"{at}.{k}" if at else k))
        return out
    return {at: v}
def same(f):
    a, b = f"{d}/off/{f}", f"{d}/plain/{f}"
    if not os.path.exists(b): return False
    if filecmp.cmp(a, b, shallow=False): return True
    if not f.endswith(".json"): return False
    # A manifest names its run and its settings: those may differ (the setting under test),
    # every other field may not.
    x, y = flat(json.load(open(a))), flat(json.load(open(b)))
    keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
    allowed = [k for k in keys if "optimizer_overlap" in k or k.endswith("run_id")
               or k.endswith("_at_ns")]
    print(f"{f}: fields that differ: {[(k, x.get(k), y.get(k)) for k in keys]}")
    return keys == allowed
differ = [f for f in sorted(files) if not same(f)]
print(f"{len(files)} saved files compared, {len(differ)} differ: {differ}")
if differ or "model.bin" not in files:
    ok = False
print("run_optimizer_overlap: OK" if ok else "FAIL: the overlapped run differs from the reference order")
sys.exit(0 if ok else 1)
PY
