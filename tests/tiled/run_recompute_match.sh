#!/bin/sh
# Selective recompute end to end (issue 31): `tierzero train` on <ranks> ranks with tensor
# parallelism <tp> or Ulysses <ulysses>, 4 steps of a small GPT (seq_len 80: past one tile of the tiled attention), with
# --recompute none, selective and full. The three runs must agree bit for bit: every step's loss
# and gradient norm (as printed) and the saved model (cmp), which the gradients decide. Each
# rank's tracked activation peak must equal `tierzero estimate --recompute <mode> --json`'s
# activation bytes exactly, and fall from none to selective to full.
# <ulysses> > 1 runs Ulysses sequence parallelism instead (the recompute re-shards the heads' output).
# <compute> fp32, or bf16: bf16 working parameters and 16-bit compute (issue 26), whose recompute
# must match the same way and whose smaller activations the estimate must count to the byte.
# <sp> true: Megatron's sequence parallelism over the tp ranks. <arch> gpt2, or llama (RMSNorm,
# rotary positions, SwiGLU, 4 query heads over 2 kv heads, untied head).
# usage: run_recompute_match.sh <tierzero> <ranks> <tp> <ulysses> <compute> <sp> <arch>
#                               <mpiexec command...>
tierzero=$1; ranks=$2; tp=$3; ulysses=$4; compute=$5; sp=$6; arch=$7
shift 7
arch_keys=""
[ "$arch" = llama ] && arch_keys='"architecture": "llama", "num_key_value_heads": 2,
                        "intermediate_size": 176, "tie_word_embeddings": false,'
# save_model <mode>: the trained model into $dir/<mode>.bin, an llm.c file (GPT-2) or, for the
# Llama family (which llm.c files cannot hold), the fp32 export of the last training checkpoint.
save_flags() {
  if [ "$arch" = llama ]; then echo "--save-dir $dir/$1.ck --save-every 4"
  else echo "--save $dir/$1.bin"; fi
}
save_model() {
  [ "$arch" = llama ] || return 0
  "$tierzero" export "$dir/$1.ck/step-00000004" --hf-dir --dtype fp32 -o "$dir/$1.hf" \
    > "$dir/$1.export.log" 2>&1 || { cat "$dir/$1.export.log"; echo "FAIL: export $1"; exit 1; }
  cp "$dir/$1.hf/model.safetensors" "$dir/$1.bin"
}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
precision=""
[ "$compute" = bf16 ] && precision=', "bf16": {"enabled": true}'
cat > "$dir/config.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5 $precision,
 "tierzero": {"steps": 4, "seq_len": 80, "seed": 7, "threads": 1, "val_batches": 1,
              "tensor_parallel": $tp, "ulysses_parallel": $ulysses, "compute_dtype": "$compute",
              "sequence_parallel": $sp,
              "model": {$arch_keys "vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "context_length": 80}}}
JSON
fail=0
for mode in none selective full; do
  "$tierzero" estimate --config "$dir/config.json" --ranks "$ranks" --recompute "$mode" --json \
    > "$dir/$mode.estimate.json" || { echo "FAIL: estimate --recompute $mode"; exit 1; }
  if ! timeout -k 5 300 "$@" -n "$ranks" "$tierzero" train --config "$dir/config.json" \
      --recompute "$mode" --metrics "$dir/$mode.jsonl" $(save_flags "$mode") \
      --memory-json "$dir/$mode.mem.json" > "$dir/$mode.log" 2>&1; then
    cat "$dir/$mode.log"; echo "FAIL: train --recompute $mode"; exit 1
  fi
  save_model "$mode"
  field() { sed -n "s/.*\"$1\": *\([^,]*\),.*/\1/p" "$2"; }
  for f in loss grad_norm; do field "$f" "$dir/$mode.jsonl" > "$dir/$mode.$f"; done
  echo "recompute $mode: losses $(tr '\n' ' ' < "$dir/$mode.loss")"
  if [ "$compute" = bf16 ] && ! grep -q "16-bit compute: products and their activations in bf16" \
      "$dir/$mode.log"; then
    echo "FAIL: train --recompute $mode did not compute in bf16"; fail=1
  fi
done
for mode in selective full; do
  for f in loss grad_norm; do
    if cmp -s "$dir/none.$f" "$dir/$mode.$f" && [ -s "$dir/none.$f" ]; then
      echo "$mode vs none: every step's $f identical"
    else
      echo "FAIL: $mode vs none: $f differs"; paste "$dir/none.$f" "$dir/$mode.$f"; fail=1
    fi
  done
  if cmp "$dir/none.bin" "$dir/$mode.bin"; then
    echo "$mode vs none: the trained model is bit for bit the same"
  else
    echo "FAIL: $mode vs none: the trained models differ"; fail=1
  fi
done
python3 - "$dir" "$ranks" <<'PY' || fail=1
import json, sys
d, ranks = sys.argv[1], int(sys.argv[2])
ok = True
peaks = {}
for mode in ("none", "selective", "full"):
    est = json.load(open(f"{d}/{mode}.estimate.json"))
    want = est["buffers"]["device"].get("activation", 0) + est["tiers"]["device"].get("activation", 0)
    for r in range(ranks):
        path = f"{d}/{mode}.mem.json" + ("" if r == 0 else f".rank{r}")
        got = json.load(open(path))["tiers"]["device"]["activation"]["peak"]
        print(f"{mode:9s} rank {r}: activation peak {got} bytes, estimate {want}"
              + ("" if got == want else "  MISMATCH"))
        ok &= got == want
        peaks.setdefault(mode, got)
if not peaks["full"] < peaks["selective"] < peaks["none"]:
    print(f"FAIL: the activation peak does not fall none > selective > full: {peaks}")
    ok = False
sys.exit(0 if ok else 1)
PY
[ "$fail" -eq 0 ] && echo "run_recompute_match: OK" || echo "run_recompute_match: FAILED"
exit "$fail"
