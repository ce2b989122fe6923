#!/bin/sh
# `tierzero export` of tensor-parallel checkpoints (issue 30): tp 2 on <ranks> ranks (dp = ranks /
# (2 x <pp>); ZeRO-3 when dp > 1, else ZeRO-1 with sequence parallelism), <pp> pipeline stages.
#  gpt2:  a tiny GPT-2 trains 2 steps, saving a training checkpoint and the llm.c model file
#         (`--save`, which gathers the pieces over the tp group itself). The export, as one
#         safetensors file (read back by the `safetensors` package) and as a Hugging Face
#         directory in fp32 with several shards, equals the llm.c file bit for bit; in bf16,
#         within bf16 rounding. A tp checkpoint whose rank files list no tensors is refused.
#  llama_tiny, qwen2_tiny: h-llama's fixtures, written by transformers (GQA with 4 heads over 2
#         kv heads, SwiGLU; llama_tiny: an untied head; qwen2_tiny: q/k/v biases, tied
#         embeddings), are loaded (`--load`, `--steps 0`) by the tp ranks and
#         saved as a training checkpoint; its export in fp32 equals the fixture's every tensor bit
#         for bit (bf16: within rounding). Then the Llama modules train 2 steps from it and save;
#         the export of that is loaded again by the same layout (`--load DIR`, which cuts each
#         rank's pieces with the loader's own mapping) and saved: every rank's parameter and master
#         blocks equal the trained checkpoint's byte for byte. The single-file form, GPT-2 only,
#         refuses the Llama model clearly.
# usage: run_tp_export.sh <tierzero> <check_safetensors.py> <gpt2|llama_tiny|qwen2_tiny> <ranks> <pp>
#                         <mpiexec command...>
tierzero=$1; check=$2; model=$3; ranks=$4; pp=$5
shift 5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
python3 -c "import safetensors, numpy" || { echo "FAIL: the Python packages safetensors and numpy are missing (scripts/setup.sh installs them)"; exit 1; }
tp=2
dp=$((ranks / (tp * pp)))
if [ "$dp" -gt 1 ]; then stage=3; sp=false; else stage=1; sp=true; fi
micro=1; [ "$pp" -gt 1 ] && micro=2
echo "tp $tp x dp $dp x pp $pp, ZeRO-$stage, sequence parallel $sp"

# hf.py: every tensor of a Hugging Face directory or safetensors file (parsed here: numpy has no
# bfloat16) as fp32, by name without the "transformer." prefix.
cat > "$dir/hf.py" <<'PY'
import glob, json, os, struct
import numpy as np
def tensors(path):
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    out = {}
    for f in files:
        raw = open(f, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for name, t in json.loads(raw[8:8 + n]).items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            data = raw[8 + n + a:8 + n + b]
            if t["dtype"] == "F32":
                x = np.frombuffer(data, dtype=np.float32)
            elif t["dtype"] == "BF16":
                x = (np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                raise SystemExit(f"{f}: {name} is {t['dtype']}")
            out[name.removeprefix("transformer.")] = x.reshape(t["shape"])
    return out
PY
# compare.py A B tol: the tensors of A and B (directories or files; B may be an llm.c file: the
# GPT-2 names) the same names and shapes, values within relative tol (0: bit for bit).
cat > "$dir/compare.py" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
from hf import tensors
def llmc(path):
    h = np.fromfile(path, dtype=np.int32, count=256)
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    data = np.fromfile(path, dtype=np.float32, offset=1024)
    kinds = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
             ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
             ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
             ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
             ("lnfw", (C,)), ("lnfb", (C,))]
    ref, at = {}, 0
    for k, s in kinds:
        n = int(np.prod(s)); ref[k] = data[at:at + n].reshape(s); at += n
    out = {"wte.weight": ref["wte"][:V], "wpe.weight": ref["wpe"], "ln_f.weight": ref["lnfw"],
           "ln_f.bias": ref["lnfb"]}
    names = {"ln_1.weight": "ln1w", "ln_1.bias": "ln1b", "attn.c_attn.weight": "qkvw",
             "attn.c_attn.bias": "qkvb", "attn.c_proj.weight": "attprojw",
             "attn.c_proj.bias": "attprojb", "ln_2.weight": "ln2w", "ln_2.bias": "ln2b",
             "mlp.c_fc.weight": "fcw", "mlp.c_fc.bias": "fcb", "mlp.c_proj.weight": "fcprojw",
             "mlp.c_proj.bias": "fcprojb"}
    for l in range(L):
        for n, k in names.items():
            t = ref[k][l]
            out[f"h.{l}.{n}"] = t.T if t.ndim == 2 else t  # HF's Conv1D: (in, out)
    return out
a = tensors(sys.argv[1])
b = llmc(sys.argv[2]) if sys.argv[2].endswith(".bin") else tensors(sys.argv[2])
tol = float(sys.argv[3])
assert set(a) == set(b), (sorted(set(a) ^ set(b)))
worst_abs = worst_rel = 0.0
for name in b:
    assert a[name].shape == b[name].shape, (name, a[name].shape, b[name].shape)
    err = np.abs(a[name].astype(np.float64) - b[name])
    worst_abs = max(worst_abs, float(err.max()))
    worst_rel = max(worst_rel, float((err / np.maximum(np.abs(b[name]), 1e-30)).max()))
print(f"  {sys.argv[1].rsplit('/', 1)[-1]} vs {sys.argv[2].rsplit('/', 1)[-1]}: {len(b)} tensors, "
      f"max abs error {worst_abs:.3g}, max relative error {worst_rel:.3g} (bound {tol:g})")
sys.exit(0 if (worst_abs == 0 if tol == 0 else worst_rel <= tol) else 1)
PY
# same_blocks.py A B: every rank's parameter and master blocks of checkpoint B equal A's.
cat > "$dir/same_blocks.py" <<'PY'
import json, sys
a, b = sys.argv[1], sys.argv[2]
ranks = json.load(open(f"{a}/manifest.json"))["identity"]["ranks"]
n = 0
for r in range(ranks):
    ja, jb = (json.load(open(f"{d}/rank-{r:05d}.json")) for d in (a, b))
    da, db = (open(f"{d}/rank-{r:05d}.bin", "rb").read() for d in (a, b))
    wanted = ("params_full", "param_shard", "master")
    ba = {x["name"]: x for x in ja["blocks"] if x["kind"] in wanted}
    bb = {x["name"]: x for x in jb["blocks"] if x["kind"] in wanted}
    assert ba.keys() == bb.keys(), (r, sorted(ba.keys() ^ bb.keys()))
    for name, x in ba.items():
        y = bb[name]
        if da[x["offset"]:x["offset"] + x["bytes"]] != db[y["offset"]:y["offset"] + y["bytes"]]:
            sys.exit(f"rank {r}: block {name} differs")
        n += 1
print(f"  {n} parameter and master blocks of {ranks} ranks equal byte for byte")
PY

par="\"tensor_parallel\": $tp, \"sequence_parallel\": $sp, \"pipeline_parallel\": $pp,"
zero="{\"stage\": $stage, \"stage3_param_persistence_threshold\": 0}"
run() {  # run <log> <command...>
  log=$1; shift
  timeout -k 5 200 "$@" > "$log" 2>&1 || { cat "$log"; echo "FAIL: $*"; exit 1; }
}
export_to() {  # export_to <checkpoint> <output> <flags...>: the export's line printed
  ck=$1; out=$2; shift 2
  run "$dir/export.out" "$tierzero" export "$ck" -o "$out" "$@"
  cat "$dir/export.out"
  grep -q "assembled from tp $tp pieces" "$dir/export.out" ||
    { echo "FAIL: export does not say it assembled tp pieces"; fail=1; }
}

if [ "$model" = gpt2 ]; then
  cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": $micro,
 "zero_optimization": $zero,
 "tierzero": {"steps": 2, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0, $par
              "pipeline_schedule": "1f1b",
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 16}}}
JSON
  run "$dir/train.out" "$@" -n "$ranks" "$tierzero" train --config "$dir/run.json" \
    --save-dir "$dir/ck" --save "$dir/model.bin"
  echo "== one safetensors file"
  export_to "$dir/ck" "$dir/model.safetensors"
  python3 "$check" "$dir/model.safetensors" "$dir/model.bin" || fail=1
  echo "== Hugging Face directories"
  export_to "$dir/ck" "$dir/hf32" --hf-dir --dtype fp32 --max-shard-size 40KB
  [ -f "$dir/hf32/model.safetensors.index.json" ] || { echo "FAIL: one shard, expected several"; fail=1; }
  python3 "$dir/compare.py" "$dir/hf32" "$dir/model.bin" 0 || fail=1
  export_to "$dir/ck" "$dir/hf16" --hf-dir
  python3 "$dir/compare.py" "$dir/hf16" "$dir/model.bin" 0.0040 || fail=1
  echo "== a tp checkpoint without its tensors' places"
  cp -r "$dir/ck/step-00000002" "$dir/bare"
  for f in "$dir"/bare/rank-*.json; do
    python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); j["tensors"] = []; json.dump(j, open(sys.argv[1], "w"))' "$f"
  done
  "$tierzero" export "$dir/bare" -o "$dir/bare.safetensors" > "$dir/bare.out" 2>&1
  cat "$dir/bare.out"
  grep -q "holds tensor-parallel pieces (tp 2) but its rank files list no tensors" "$dir/bare.out" &&
    [ ! -e "$dir/bare.safetensors" ] || { echo "FAIL: not a clear refusal"; fail=1; }
else
  fixture=$(dirname "$0")/../data/llama/$model
  # The model comes from --load (the fixture's config.json, then the exported directory's).
  cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": $micro,
 "zero_optimization": $zero,
 "tierzero": {"steps": 2, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0, $par
              "pipeline_schedule": "1f1b"}}
JSON
  # Its vocabulary (256) is below the built-in corpus's (257): tokens of our own.
  python3 -c 'import numpy as np, sys
h = np.zeros(256, np.int32); h[:3] = (20240520, 1, 4096)
t = np.random.default_rng(7).integers(0, 256, 4096).astype(np.uint16)
open(sys.argv[1], "wb").write(h.tobytes() + t.tobytes())' "$dir/tokens.bin"
  data="--data $dir/tokens.bin"
  echo "== the transformers fixture, loaded by the tp ranks and exported"
  run "$dir/load.out" "$@" -n "$ranks" "$tierzero" train --config "$dir/run.json" $data \
    --load "$fixture" --steps 0 --save-dir "$dir/ck0"
  export_to "$dir/ck0" "$dir/fx32" --hf-dir --dtype fp32 --max-shard-size 20KB
  python3 "$dir/compare.py" "$dir/fx32" "$fixture/model.safetensors" 0 || fail=1
  export_to "$dir/ck0" "$dir/fx16" --hf-dir
  python3 "$dir/compare.py" "$dir/fx16" "$fixture/model.safetensors" 0.0040 || fail=1
  echo "== trained from it, exported, loaded again by the same layout"
  run "$dir/train.out" "$@" -n "$ranks" "$tierzero" train --config "$dir/run.json" $data \
    --load "$fixture" --save-dir "$dir/ck"
  export_to "$dir/ck" "$dir/hf32" --hf-dir --dtype fp32 --max-shard-size 20KB
  run "$dir/again.out" "$@" -n "$ranks" "$tierzero" train --config "$dir/run.json" $data \
    --load "$dir/hf32" --steps 0 --save-dir "$dir/again"
  python3 "$dir/same_blocks.py" "$dir/ck/step-00000002" "$dir/again/step-00000000" || fail=1
  echo "== the single GPT-2 file refuses a Llama model"
  "$tierzero" export "$dir/ck" -o "$dir/llama.safetensors" > "$dir/one.out" 2>&1
  cat "$dir/one.out"
  grep -q "cannot hold the Llama-family model" "$dir/one.out" && [ ! -e "$dir/llama.safetensors" ] ||
    { echo "FAIL: not a clear refusal"; fail=1; }
fi
[ $fail -eq 0 ] && echo "run_tp_export: OK"
exit $fail
