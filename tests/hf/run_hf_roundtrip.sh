#!/bin/sh
# Hugging Face model directories end to end (issue 30):
#  1. A tiny GPT-2 trains 2 steps, writing a training checkpoint and the llm.c model file.
#  2. `tierzero export --hf-dir` writes it in fp32, bf16 and fp16 with 40 KB shards (several);
#     `train --load DIR --steps 0 --save` imports each: the model saved equals the llm.c file bit
#     for bit in fp32 and within the dtype's rounding in bf16 / fp16 (max errors printed), wte's
#     padding rows (which HF files do not hold) zero.
#  3. 2 ranks at ZeRO-3 load the bf16 directory by range: the model they save equals the one-rank
#     import bit for bit.
#  4. Export into a non-empty directory and --load of a directory without config.json are clear
#     one-line errors.
# usage: run_hf_roundtrip.sh <tierzero> <mpiexec command...>
tierzero=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
python3 -c "import numpy" || { echo "FAIL: numpy is missing (scripts/setup.sh installs it)"; exit 1; }
cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0},
 "tierzero": {"steps": 2, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 16}}}
JSON
timeout -k 5 120 "$tierzero" train --config "$dir/run.json" --save-dir "$dir/ck" \
  --save "$dir/model.bin" > "$dir/train.out" 2>&1 || { cat "$dir/train.out"; exit 1; }

# compare.py A B tolerance: llm.c files equal within relative `tolerance` (0: bit for bit), wte's
# padding rows of B zero.
cat > "$dir/compare.py" <<'PY'
import sys
import numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
ha = np.fromfile(a, dtype=np.int32, count=256)
V, C, Vp = int(ha[3]), int(ha[6]), int(ha[7])
x = np.fromfile(a, dtype=np.float32)[256:].copy()
y = np.fromfile(b, dtype=np.float32)[256:]
assert x.shape == y.shape, (x.shape, y.shape)
pad = slice(V * C, Vp * C)
assert not y[pad].any(), "wte's padding rows are not zero"
x[pad] = 0
err = np.abs(x - y)
rel = float((err / np.maximum(np.abs(x), 1e-3)).max())
print(f"  {b.split('/')[-1]}: max abs error {err.max():.3g}, max relative error {rel:.3g} (bound {tol:g})")
sys.exit(0 if (err.max() == 0 if tol == 0 else rel <= tol) else 1)
PY

for dt in fp32 bf16 fp16; do
  "$tierzero" export "$dir/ck" -o "$dir/hf_$dt" --hf-dir --dtype $dt --max-shard-size 40KB \
    > "$dir/export.out" 2>&1 || { cat "$dir/export.out"; exit 1; }
  cat "$dir/export.out"
  shards=$(ls "$dir/hf_$dt" | grep -c '^model-.*-of-.*\.safetensors$')
  [ "$shards" -gt 2 ] && [ -f "$dir/hf_$dt/model.safetensors.index.json" ] ||
    { echo "FAIL: $dt: $shards shards, expected several and an index"; fail=1; }
  timeout -k 5 120 "$tierzero" train --config "$dir/run.json" --load "$dir/hf_$dt" --steps 0 \
    --save "$dir/imported_$dt.bin" > "$dir/load.out" 2>&1 || { cat "$dir/load.out"; exit 1; }
  case $dt in fp32) tol=0 ;; bf16) tol=0.0040 ;; fp16) tol=0.0005 ;; esac
  python3 "$dir/compare.py" "$dir/model.bin" "$dir/imported_$dt.bin" $tol ||
    { echo "FAIL: $dt directory does not load as the checkpoint's model"; fail=1; }
done

sed 's/"stage": 0/"stage": 3/' "$dir/run.json" > "$dir/z3.json"
timeout -k 5 120 "$@" -n 2 "$tierzero" train --config "$dir/z3.json" --load "$dir/hf_bf16" \
  --steps 0 --save "$dir/z3.bin" > "$dir/z3.out" 2>&1 || { cat "$dir/z3.out"; exit 1; }
echo "2 ranks, ZeRO-3, by range:"
python3 "$dir/compare.py" "$dir/imported_bf16.bin" "$dir/z3.bin" 0 ||
  { echo "FAIL: 2 ranks at ZeRO-3 load the directory differently"; fail=1; }

"$tierzero" export "$dir/ck" -o "$dir/hf_bf16" --hf-dir > "$dir/again.out" 2>&1
grep "error" "$dir/again.out"
grep -q "not empty" "$dir/again.out" || { echo "FAIL: export into a non-empty directory"; fail=1; }
# --dtype is the directory's: on the single (fp32) file it is refused even at its default value.
"$tierzero" export "$dir/ck" -o "$dir/single.safetensors" --dtype bf16 > "$dir/dtype.out" 2>&1
grep "error" "$dir/dtype.out"
grep -q "apply to a Hugging Face directory output" "$dir/dtype.out" && [ ! -e "$dir/single.safetensors" ] ||
  { echo "FAIL: --dtype bf16 on a single file was accepted"; fail=1; }
# A safetensors file by any name loads (it is known by its first bytes), and a training
# checkpoint given to --load says to resume or export it.
"$tierzero" export "$dir/ck" -o "$dir/model.st" > "$dir/st.out" 2>&1 || { cat "$dir/st.out"; fail=1; }
"$tierzero" train --config "$dir/run.json" --load "$dir/model.st" --steps 0 > "$dir/st_load.out" 2>&1 ||
  { echo "FAIL: a safetensors file named .st does not load"; tail -3 "$dir/st_load.out"; fail=1; }
"$tierzero" train --config "$dir/run.json" --load "$dir/ck" --steps 0 > "$dir/ck_load.out" 2>&1
grep "error" "$dir/ck_load.out"
grep -q "it is a training checkpoint" "$dir/ck_load.out" ||
  { echo "FAIL: --load of a training checkpoint does not say to resume or export it"; fail=1; }
mkdir "$dir/empty"
"$tierzero" train --config "$dir/run.json" --load "$dir/empty" --steps 0 > "$dir/empty.out" 2>&1
grep "error" "$dir/empty.out"
grep -q "has no config.json" "$dir/empty.out" && ! grep -q "^step " "$dir/empty.out" ||
  { echo "FAIL: a directory without config.json is not a clear error"; fail=1; }
[ $fail -eq 0 ] && echo "run_hf_roundtrip: OK"
exit $fail
