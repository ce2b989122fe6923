#!/bin/sh
# `tierzero export` and `--load model.safetensors` end to end (issue 17):
#  1. 2 ranks at ZeRO-3 with parameters and optimizer on NVMe train 4 steps, writing a training
#     checkpoint and the llm.c model file; `tierzero export` writes the checkpoint's model as HF
#     GPT-2 safetensors, and the `safetensors` Python package reads every tensor back equal to the
#     llm.c file (names, transposed Conv1D shapes, values bit for bit).
#  2. `train --load model.safetensors` imports it: the model it saves at step 0 equals it again.
#  3. A 57M-parameter model (228 MB of fp32 weights): export's measured peak resident memory, less
#     that of exporting the tiny model (the binary's own: with the CUDA backend built its libraries
#     take ~150 MB), must stay under half the model's size (it streams one tensor and one
#     checkpoint block at a time).
#  4. A truncated safetensors file is a clear error. (Tensor-parallel checkpoints:
#     tests/tp/run_tp_export.sh.)
#  5. kill -9 in the middle of saving a checkpoint (the big model's, ~700 MB of state): the
#     previous checkpoint stays the one `latest` names, and resuming from the directory works.
# usage: run_export.sh <tierzero> <check_safetensors.py> <mpiexec command...>
tierzero=$1; check=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
python3 -c "import safetensors, numpy" || { echo "FAIL: the Python package safetensors is missing (scripts/setup.sh installs it)"; exit 1; }
nvme="{\"device\": \"nvme\", \"nvme_path\": \"$dir\"}"
cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "offload_param": $nvme, "offload_optimizer": $nvme},
 "tierzero": {"steps": 4, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 16}}}
JSON
timeout -k 5 120 "$@" -n 2 "$tierzero" train --config "$dir/run.json" --save-dir "$dir/ck" \
  --save "$dir/model.bin" > "$dir/train.out" 2>&1 || { cat "$dir/train.out"; exit 1; }
"$tierzero" export "$dir/ck" -o "$dir/model.safetensors" > "$dir/small_export.out" 2>&1 ||
  { cat "$dir/small_export.out"; exit 1; }
cat "$dir/small_export.out"
base_mb=$(sed -n 's/.*peak resident memory \([0-9.]*\) MB.*/\1/p' "$dir/small_export.out")
python3 "$check" "$dir/model.safetensors" "$dir/model.bin" || fail=1

sed 's/"stage": 3, "offload_param": [^}]*}, "offload_optimizer": [^}]*}/"stage": 0/' "$dir/run.json" > "$dir/load.json"
timeout -k 5 120 "$tierzero" train --config "$dir/load.json" --load "$dir/model.safetensors" \
  --steps 0 --save "$dir/imported.bin" > "$dir/load.out" 2>&1 || { cat "$dir/load.out"; exit 1; }
echo "imported, saved at step 0:"
python3 "$check" "$dir/model.safetensors" "$dir/imported.bin" || fail=1

cat > "$dir/big.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0},
 "tierzero": {"steps": 1, "seq_len": 16, "seed": 7, "threads": 2, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 8, "n_head": 8, "n_embd": 768,
                        "context_length": 64}}}
JSON
timeout -k 5 300 "$tierzero" train --config "$dir/big.json" --save-dir "$dir/big" \
  --save "$dir/big.bin" > "$dir/big.out" 2>&1 || { cat "$dir/big.out"; exit 1; }
"$tierzero" export "$dir/big" -o "$dir/big.safetensors" > "$dir/export.out" 2>&1 || { cat "$dir/export.out"; exit 1; }
cat "$dir/export.out"
rss_mb=$(sed -n 's/.*peak resident memory \([0-9.]*\) MB.*/\1/p' "$dir/export.out")
model_mb=$(($(stat -c %s "$dir/big.bin") / 1000000))
echo "export peak RSS $rss_mb MB for a $model_mb MB model, $base_mb MB for the tiny one (bound: the difference under half the model)"
awk -v r="$rss_mb" -v b="$base_mb" -v m="$model_mb" 'BEGIN { exit (r > 0 && b > 0 && r - b < m / 2) ? 0 : 1 }' ||
  { echo "FAIL: export held too much memory"; fail=1; }
python3 "$check" "$dir/big.safetensors" "$dir/big.bin" || fail=1

head -c 4000 "$dir/model.safetensors" > "$dir/cut.safetensors"
"$tierzero" train --config "$dir/load.json" --load "$dir/cut.safetensors" --steps 0 > "$dir/cut.out" 2>&1
grep "error" "$dir/cut.out"
grep -q "cut.safetensors" "$dir/cut.out" && ! grep -q "^step " "$dir/cut.out" ||
  { echo "FAIL: a truncated safetensors file is not a clear error"; fail=1; }
echo "== kill -9 while a checkpoint is written"
sed 's/"steps": 1/"steps": 2/' "$dir/big.json" > "$dir/big2.json"
"$tierzero" train --config "$dir/big2.json" --save-dir "$dir/kill" --save-every 1 > "$dir/kill.out" 2>&1 &
pid=$!
i=0
while [ ! -d "$dir/kill/step-00000002.tmp" ] && [ $i -lt 3000 ] && kill -0 $pid 2>/dev/null; do
  sleep 0.02; i=$((i + 1))
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
ls "$dir/kill"
if [ -d "$dir/kill/step-00000002" ]; then
  echo "FAIL: the kill came after the save of step 2 had finished; nothing was tested"; fail=1
elif [ "$(cat "$dir/kill/latest")" != "step-00000001" ]; then
  echo "FAIL: latest is not the previous checkpoint after the kill"; fail=1
else
  timeout -k 5 300 "$tierzero" train --config "$dir/big2.json" --resume "$dir/kill" \
    > "$dir/after.out" 2>&1 && grep -q "resumed after step 1" "$dir/after.out" &&
    echo "killed mid-save (step-00000002.tmp left behind): resumed from step-00000001" ||
    { cat "$dir/after.out"; echo "FAIL: resuming after the kill"; fail=1; }
fi
[ $fail -eq 0 ] && echo "run_export: OK"
exit $fail
