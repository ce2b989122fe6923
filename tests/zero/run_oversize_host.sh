#!/bin/sh
# Oversize for the host too: a 24-layer, 256-channel GPT (about 19M parameters: about 300 MB of
# fp32 training state, params, grads, Adam m and v) trains 3 steps at ZeRO stage 3 with all of
# its state on NVMe (tierzero.offload_gradients nvme) under a pinned host budget of <host> MiB and
# a device budget of 36 MiB, with 2 micro-batches per step (the gradients are accumulated on
# NVMe). Checks, from the --memory-json file:
#   - the model state on NVMe is at least 4x the host budget, and nothing of it is on the host;
#   - the tracked host peak is within the host budget;
#   - the process's peak RSS (getrusage) is below host + device budgets + a fixed margin for the
#     binary, its libraries and MPI (less than the state itself, so the state was not resident);
# and the per-step losses equal those of the same run with every state in memory (stage 3 on
# the device tier, no budgets) within 1e-5 relative. Prints what it measured.
# usage: run_oversize_host.sh <tierzero> [host_mib]
tierzero=$1; host_mib=${2:-64}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
device_mib=36; margin_mib=160
write_config() {  # <file> <offload>
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                       "stage3_max_live_parameters": 1700000,
                       "stage3_prefetch_bucket_size": 800000,
                       "reduce_bucket_size": 1000000 $2},
 "tierzero": {"steps": 3, "seq_len": 32, "val_batches": 1, "activation_checkpointing": true,
              "seed": 3, "offload_gradients": "nvme",
              "model": {"vocab_size": 257, "n_layer": 24, "n_head": 4, "n_embd": 256,
                        "context_length": 32}}}
JSON
}
# buffer_size (the optimizer's NVMe chunk, elements) is the optimizer's key only.
pnvme="{\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_count\": 4}"
onvme="{\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_size\": 262144, \"buffer_count\": 4}"
write_config "$dir/oversize.json" ", \"offload_param\": $pnvme, \"offload_optimizer\": $onvme"
write_config "$dir/memory.json" ""
sed -i 's/"offload_gradients": "nvme",//' "$dir/memory.json"
cat "$dir/oversize.json"
echo "== all state on NVMe, host budget ${host_mib} MiB, device budget ${device_mib} MiB"
timeout -k 5 240 "$tierzero" train --config "$dir/oversize.json" --device-mem "${device_mib}MiB" \
  --host-mem "${host_mib}MiB" --memory-json "$dir/mem.json" --metrics "$dir/oversize.jsonl" \
  || exit 1
cat "$dir/mem.json"
echo "== the same run in memory"
timeout -k 5 240 "$tierzero" train --config "$dir/memory.json" --metrics "$dir/memory.jsonl" \
  > "$dir/memory.out" 2>&1 || { cat "$dir/memory.out"; exit 1; }
python3 - "$dir/mem.json" "$dir/oversize.jsonl" "$dir/memory.jsonl" "$host_mib" "$device_mib" \
  "$margin_mib" <<'PY'
import json, sys
mem = json.load(open(sys.argv[1]))
host_mib, device_mib, margin_mib = (int(v) for v in sys.argv[4:7])
mib = 1 << 20
state = {t: sum(mem["tiers"][t][c]["current"] for c in ("param", "grad", "optimizer"))
         for t in ("device", "host", "nvme")}
host_peak = mem["tier_peaks"]["host"]
rss = mem["process"]["peak_rss_bytes"]
bound = (host_mib + device_mib + margin_mib) * mib
print(f"model state: nvme {state['nvme'] / mib:.1f} MiB = {state['nvme'] / (host_mib * mib):.1f}x "
      f"the host budget; host {state['host']} B; device {state['device'] / mib:.1f} MiB")
print(f"tracked host peak {host_peak / mib:.1f} MiB (budget {host_mib} MiB); peak RSS "
      f"{rss / mib:.1f} MiB (bound {bound / mib:.0f} MiB = budgets + {margin_mib} MiB)")
fail = []
if state["nvme"] < 4 * host_mib * mib: fail.append("the state on NVMe is not 4x the host budget")
if state["host"] != 0: fail.append("model state on the host")
if host_peak > host_mib * mib: fail.append("host budget exceeded")
if rss > bound: fail.append("peak RSS above the bound")
if state["nvme"] <= bound: fail.append("the state is not larger than the RSS bound: not a proof")
def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]
a, b = losses(sys.argv[2]), losses(sys.argv[3])
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    rel = abs(x - y) / max(abs(y), 1e-12)
    worst = max(worst, rel)
    print(f"step {i + 1}: loss {x:.9g} (offloaded) {y:.9g} (in memory) rel err {rel:.3g}")
if len(a) != 3 or len(b) != 3: fail.append(f"expected 3 losses, got {len(a)} and {len(b)}")
if worst > 1e-5: fail.append(f"losses differ by {worst:.3g} relative (tolerance 1e-5)")
print("max relative loss error", worst)
if fail:
    print("FAIL:", "; ".join(fail)); sys.exit(1)
print("run_oversize_host: OK")
PY
