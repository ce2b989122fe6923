#!/usr/bin/env bash
# Runs on a lent GPU machine (see bundle.sh): unpacks the bundle, installs the carried libraries
# without replacing any the machine has, points the loader at the machine's CUDA libraries, then
# runs the CUDA tests and the GPU benchmarks. Logs go to $OUT (or ./gpu-out). Usage:
#   scripts/device/gpu_check.sh [tests|bench|all] [ctest -R pattern]
#   scripts/device/gpu_check.sh sanitize <gtest filter of test_kernels>
#   scripts/device/gpu_check.sh oversize "<bench oversize arguments>"
#   scripts/device/gpu_check.sh offload ["<bench offload arguments>"]   (issue 27: the offloaded
#     step against its engines' floor on cuda, host mode then nvme mode; default GPT-2 XL, B 1,
#     T 1024; about 9 minutes, timeout 600)
#   scripts/device/gpu_check.sh offload_peers ["<bench offload arguments>"]   (issue 27 (a): host
#     mode, then the same model, micro-batch and sequence in PyTorch FSDP2 with CPUOffloadPolicy
#     and DeepSpeed ZeRO-3 cpu offload (scripts/device/peer_offload_torch.py; carry .devpeers,
#     see peers_prepare_offload.sh), with our tokens/s over theirs; about 10 minutes, timeout 600.
#     Issue 27's larger shapes: "--model 24,32,4096 ..." (4.9B parameters, about 88 GB of host
#     state: the largest round shape 128 GiB holds) in host mode; in nvme mode the largest the
#     64 GiB disk holds at 18 bytes per parameter, about 2.7B (e.g. "--model 40,32,2304"))
#   scripts/device/gpu_check.sh peers [micro-batch]   (GPT-2 124M, T 1024: ours vs PyTorch eager,
#     torch.compile and llm.c's train_gpt2cu from .devpeers/, see peers_prepare.sh; "max": the
#     largest micro-batch our step fits, bench train --batch 0)
#   scripts/device/gpu_check.sh lease [seconds]   (everything above that one short lease can hold,
#     most telling first, each step only if its own limit still fits in `seconds` (default 500):
#     issue 26's kernel tests and the GPT's 16-bit step against the CPU's, bench train bf16 with
#     16-bit and with fp32 activations, the 300-step bf16 loss curve against fp32, the
#     peers at B 16, bench train bf16 at the largest micro-batch that fits, bench train fp32,
#     compute-sanitizer memcheck, host waits, racecheck, the other CUDA tests; carry .devbundle
#     and .devpeers, timeout 600, seconds 540)
#   scripts/device/gpu_check.sh issue26   (issue 26's first parts, one call of under 10 minutes:
#     the fused attention (its bitwise repeatability included), the deterministic gradient sums
#     (GradientSumsTest: embedding, bias and norm gradients repeat bit for bit) and
#     matmul-precision kernel tests on CUDA, compute-sanitizer memcheck and racecheck of the fused
#     attention, bench train at
#     fp32 / tf32 / bf16 products, then every other CUDA test as far as time allows). Prepared on
#     the development machine with
#       cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERZERO_CUDA=ON \
#         -DCMAKE_CUDA_ARCHITECTURES=90 -DTIERZERO_NATIVE=OFF && cmake --build build/gpu -j2
#       scripts/device/bundle.sh
#     then run with the device tool: carry .devbundle, command
#       scripts/device/gpu_check.sh issue26, timeout 600 (the steps' own limits sum to ~9 min)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
what=${1:-all}
pattern=${2:-}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
log() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }

log "unpack"
stage=/tmp/tzbundle
mkdir -p "$stage" build/gpu
xz -dc .devbundle/bundle.tar.xz | tar -C "$stage" -xf -
tar -C build/gpu -xf "$stage/build.tar"
# No clobber: the machine's own (newer) libraries stay.
cp -rn "$stage/root/." / 2>/dev/null
for b in mpiexec mpirun; do [ -e /usr/bin/$b ] || ln -s orterun /usr/bin/$b; done
ldconfig 2>/dev/null
# The CTest files name the source and build trees by the paths they had when configured.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build/gpu/CMakeCache.txt)
if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi

# CUDA's libraries from this machine: the toolkit's, else the Python wheels'.
dirs=""
for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
  f=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib/python3*/ -name "$lib" 2>/dev/null |
      head -1)
  [ -n "$f" ] && dirs="$dirs:$(dirname "$f")"
  log "$lib -> ${f:-MISSING}"
done
export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_mca_base_component_show_load_errors=0
export TIERZERO_COMM_TIMEOUT_S=60 OMP_NUM_THREADS=2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$out/summary.txt"
tz=build/gpu/src/cli/tierzero
ldd $tz | grep -E "not found" | tee -a "$out/summary.txt"
mpiexec --version 2>&1 | head -1 | tee -a "$out/summary.txt"

if [ "$what" = tests ] || [ "$what" = all ]; then
  log "ctest: CUDA-labelled and device/kernel tests"
  sel=${pattern:-"/cuda|Cuda|_cuda"}
  (cd build/gpu && timeout 240 ctest -R "$sel" -j6 --timeout 120 --output-on-failure \
     --output-junit "$out/junit.xml") >"$out/ctest.log" 2>&1
  log "ctest exit $?"; tail -25 "$out/ctest.log" | tee -a "$out/summary.txt"
  if ! command -v ctest >/dev/null; then  # no CTest here: the GoogleTest binaries directly
    for t in tests/test_device tests/kernels/test_kernels tests/offload/test_offload; do
      timeout 120 build/gpu/$t --gtest_filter='*cuda*:*Cuda*' >"$out/$(basename $t).log" 2>&1
      log "$t exit $?"; tail -3 "$out/$(basename $t).log" | tee -a "$out/summary.txt"
    done
  fi
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  log "bench train (cuda)"
  timeout 90 $tz bench train --device cuda --model gpt2 --batch 8 --seq 1024 --steps 5 \
    >"$out/bench_train.log" 2>&1; log "exit $?"; tail -15 "$out/bench_train.log" | tee -a "$out/summary.txt"
  log "train: the quick start's ZeRO-3 + NVMe offload run on cuda, one rank"
  mkdir -p build/nvme_swap
  timeout 100 $tz train --config examples/zero3_nvme_offload.json --device cuda --steps 20 \
    --memory-json "$out/mem.json" >"$out/train_nvme.log" 2>&1
  log "exit $?"; tail -15 "$out/train_nvme.log" | tee -a "$out/summary.txt"
  gpus=$(nvidia-smi -L | grep -c "^GPU")
  log "train: one rank more than GPUs ($gpus) must be a clear error"
  timeout 60 mpiexec -n $((gpus + 1)) $tz train --config examples/zero3_nvme_offload.json \
    --device cuda --steps 1 >"$out/train_too_many.log" 2>&1
  log "exit $?"; grep -m2 "error" "$out/train_too_many.log" | tee -a "$out/summary.txt"
fi
if [ "$what" = oversize ]; then  # `bench oversize` on cuda; pattern: its extra arguments
  log "bench oversize --device cuda $pattern"
  # shellcheck disable=SC2086
  timeout 480 $tz bench oversize --device cuda --dir /var/tmp $pattern >"$out/oversize.log" 2>&1
  log "exit $?"; tail -30 "$out/oversize.log" | tee -a "$out/summary.txt"
fi
# Issue 27 (a)'s peers on GPT-2 XL, B 1, T 1024, state in host memory: PyTorch FSDP2 with
# CPUOffloadPolicy and DeepSpeed ZeRO-3 with cpu offload (scripts/device/peer_offload_torch.py),
# each in its own process; DeepSpeed from the wheels peers_prepare_offload.sh put in
# .devpeers/wheels, installed into a directory of its own (not the machine's site-packages).
step_offload_peers() {
  local pyextra=/tmp/tz_pyextra args=${1:-} shape="" model batch seq
  # The same model, micro-batch and sequence as ours (bench offload's --model, --batch, --seq):
  # a custom "layers,heads,channels" or a GPT-2 preset.
  model=$(sed -n 's/.*--model[= ]\([^ ]*\).*/\1/p' <<<"$args")
  batch=$(sed -n 's/.*--batch[= ]\([0-9]*\).*/\1/p' <<<"$args")
  seq=$(sed -n 's/.*--seq[= ]\([0-9]*\).*/\1/p' <<<"$args")
  case "${model:-gpt2-xl}" in
    gpt2) shape="--layers 12 --heads 12 --channels 768" ;;
    gpt2-medium) shape="--layers 24 --heads 16 --channels 1024" ;;
    gpt2-large) shape="--layers 36 --heads 20 --channels 1280" ;;
    gpt2-xl) shape="--layers 48 --heads 25 --channels 1600" ;;
    *,*,*) shape="--layers ${model%%,*} --heads $(cut -d, -f2 <<<"$model") --channels ${model##*,}" ;;
    *) log "offload peers: no peer shape for --model $model"; return ;;
  esac
  shape="$shape --batch ${batch:-1} --seq ${seq:-1024}"
  if ! python3 -c "import deepspeed" 2>/dev/null && [ -d .devpeers/wheels ]; then
    python3 -m pip install --quiet --no-index --no-deps --find-links .devpeers/wheels \
      --target "$pyextra" deepspeed hjson msgpack ninja psutil py-cpuinfo pydantic pydantic-core \
      annotated-types typing-inspection typing-extensions einops packaging tqdm \
      >"$out/pip_deepspeed.log" 2>&1
    log "deepspeed wheels installed into $pyextra: exit $?"
  fi
  for peer in fsdp2 deepspeed; do
    log "peer offload $peer: $shape, parameters and optimizer in host memory"
    # The CPU threads bench offload gives its run (--threads 8); $pyextra/bin: the ninja that
    # DeepSpeed's compilation of its CPU Adam looks for.
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=8 PATH="$pyextra/bin:$PATH" PYTHONPATH="$pyextra${PYTHONPATH:+:$PYTHONPATH}" \
      timeout 150 python3 scripts/device/peer_offload_torch.py --mode "$peer" $shape \
      >"$out/peer_offload_$peer.jsonl" 2>"$out/peer_offload_$peer.log"
    log "exit $?"; grep -E "^peer offload|Error" "$out/peer_offload_$peer.log" | tail -3 |
      tee -a "$out/summary.txt"
  done
  python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
out = sys.argv[1]
ours = None
try:
    for line in open(f"{out}/offload_host.jsonl"):
        r = json.loads(line)
        if r.get("bench") == "offload.host":
            ours = r
except (OSError, ValueError):
    pass
if ours is None or "tokens_per_s" not in ours:
    print("offload peers: no tokens/s of ours (offload_host.jsonl)")
    sys.exit(0)
for peer in ("fsdp2", "deepspeed"):
    try:
        r = json.loads(open(f"{out}/peer_offload_{peer}.jsonl").readline())
    except (OSError, ValueError):
        print(f"offload peers: {peer} gave no result (see peer_offload_{peer}.log)")
        continue
    print(json.dumps({"bench": f"offload.host_vs_{peer}", "value": ours["tokens_per_s"],
                      "unit": "tokens/s", "baseline": peer, "baseline_value": r["value"],
                      "ratio": round(ours["tokens_per_s"] / r["value"], 4)}))
PY
}

# `bench offload` on cuda; pattern: extra arguments. offload: host mode, then nvme mode (~9 min);
# offload_peers: host mode, then its peers in the same call (~10 min).
if [ "$what" = offload ] || [ "$what" = offload_peers ]; then
  args=${pattern:-"--model gpt2-xl --seq 1024 --batch 1 --steps 4 --host-mem 48GiB --device-mem 60GiB"}
  modes="host nvme"
  [ "$what" = offload_peers ] && modes=host
  for mode in $modes; do
    log "bench offload --device cuda --mode $mode $args"
    # shellcheck disable=SC2086
    timeout 270 $tz bench offload --device cuda --mode $mode --dir /var/tmp --threads 8 $args \
      >"$out/offload_$mode.jsonl" 2>"$out/offload_$mode.log"
    log "exit $?"; tail -14 "$out/offload_$mode.log" | tee -a "$out/summary.txt"
    tee -a "$out/summary.txt" <"$out/offload_$mode.jsonl"
  done
  [ "$what" = offload_peers ] && step_offload_peers "$args"
fi
if [ "$what" = sanitize ]; then  # compute-sanitizer over the GoogleTest filter given
  log "compute-sanitizer on test_kernels --gtest_filter=${pattern}"
  timeout 300 compute-sanitizer --tool memcheck build/gpu/tests/kernels/test_kernels \
    --gtest_filter="$pattern" >"$out/sanitize.log" 2>&1
  log "exit $?"; grep -E "ERROR SUMMARY|Invalid|FAILED|max_rel" "$out/sanitize.log" | head -40 |
    tee -a "$out/summary.txt"
fi

# ---- the steps of the peers, issue26 and lease modes ----

kt=build/gpu/tests/kernels/test_kernels
lkt=build/gpu/tests/test_llama_kernels
# Issue 26's kernels on cuda against the CPU reference, with the errors each test prints.
step_kernels26() {
  log "issue 26: kernel tests on cuda (fused attention, gradient sums, matmul precisions, matmul + GELU epilogues, the 16-bit linears, norms, embedding and classifier, layernorm, attention, llama, matmul, AdamW with its copy and segments)"
  timeout 90 $kt --gtest_filter='*FlashAttentionTest*/cuda:*GradientSumsTest*/cuda:*ElementwiseTest.SumSquares*/cuda:*ElementwiseTest.TransposeBlocks*/cuda:*MatmulPrecisionTest*/cuda:*MatmulGeluTest*/cuda:*Matmul16Test*/cuda:*Norm16Test*/cuda:*Classifier16Test*/cuda:*LayerNormTest*/cuda:*AttentionTest*/cuda:*MatmulTest*/cuda:*AdamWTest*/cuda' \
    >"$out/kernels26.log" 2>&1
  log "exit $?"
  # The Llama family's kernels (the fused residual + RMSNorm among them) have their own binary.
  timeout 30 $lkt --gtest_filter='*LlamaKernelTest*/cuda' >>"$out/kernels26.log" 2>&1
  log "llama kernels: exit $?"
  # The GPT's 16-bit step on CUDA against the CPU's (bf16 and fp16, GPT-2 and Llama, the whole
  # model).
  timeout 60 build/gpu/tests/test_nn --gtest_filter='Compute16.Cuda*' >>"$out/kernels26.log" 2>&1
  log "GPT 16-bit step on cuda: exit $?"
  grep -E "^\[  (PASSED|FAILED) |compute, CUDA vs CPU|^\[  FAILED  \]|flash_attention (out|dqkv).*(T1024|T257)|flash_attention \(16-bit\).*(T1024|T257)|attention16 (out|dqkv) B1 T130|flash_attention repeat|GradientSumsTest|repeat: [1-9]|CPU backend: |matmul_forward out (tf32|bf16|fp16|fp32) N77|matmul_(gelu_forward out|backward_gelu dpre) N64|matmul16_[a-z_]* [a-z]* ?[=+]* ?bf16->[a-z0-9]* N(64 IC768|50)|adamw (with a|over 150)" \
    "$out/kernels26.log" | head -72 | tee -a "$out/summary.txt"
}
# compute-sanitizer (memcheck or racecheck) over the fused attention's small test.
step_sanitize26() {
  # Issue 26's kernels at small shapes: the fused attention, the GELU epilogues (fp32 and 16-bit,
  # with the 16-bit linears' bias and GELU kernels where cuBLASLt has no epilogue), AdamW over
  # segments, the fused residual + LayerNorm, the classifier's softmax-xent, the sorted embedding
  # gradient and the column sums (through the encoder and LayerNorm backwards), the norm's sums,
  # and the fused residual + RMSNorm.
  local tool=$1 limit=120
  local san='*FlashAttentionTest.SmallForSanitizers*/cuda:*MatmulGeluTest*/cuda'
  san="$san:*Matmul16Test*/cuda:*Norm16Test*/cuda:*FlashAttentionTest.SixteenBitTensors*/cuda"
  san="$san:*Classifier16Test*/cuda"
  san="$san:*AdamWTest.SegmentsAreThePerSegmentCalls*/cuda:*LayerNormTest*/cuda"
  san="$san:*SoftmaxXentTest*/cuda:*EncoderTest*/cuda:*ElementwiseTest.SumSquares*/cuda"
  san="$san:*ElementwiseTest.TransposeBlocks*/cuda"
  [ "$tool" = racecheck ] && limit=150
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$cs" ] || cs=compute-sanitizer  # not found: the run below says so in its log
  log "compute-sanitizer --tool $tool on $san"
  timeout $limit "$cs" --tool "$tool" --error-exitcode 3 $kt --gtest_filter="$san" \
    >"$out/sanitize_$tool.log" 2>&1
  log "exit $?"
  # The fused residual + RMSNorm and SwiGLU's backward (the Llama family's), in their binary.
  timeout 40 "$cs" --tool "$tool" --error-exitcode 3 $lkt \
    --gtest_filter='*LlamaKernelTest.FusedResidualRmsNorm*/cuda:*LlamaKernelTest.Swiglu*/cuda:*LlamaKernelTest.SixteenBit*/cuda' \
    >>"$out/sanitize_$tool.log" 2>&1
  log "llama: exit $?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|PASSED|FAILED" "$out/sanitize_$tool.log" |
    head -12 | tee -a "$out/summary.txt"
}
# bench train, GPT-2 124M T 1024 at micro-batch B (default 8; 0: the largest that fits the GPU),
# products at one precision, activations in compute dtype c (default auto: 16-bit with bf16 or
# fp16 products; fp32: the working copy widened, the path before 16-bit compute).
step_bench_precision() {
  local p=$1 B=${2:-8} limit=${3:-40} c=${4:-auto}
  local tag="${p}_B${B}_$c"
  log "bench train --device cuda --model gpt2 --batch $B --seq 1024 --steps 5 --matmul-precision $p --compute-dtype $c"
  timeout "$limit" $tz bench train --device cuda --model gpt2 --batch "$B" --seq 1024 --steps 5 \
    --matmul-precision "$p" --compute-dtype "$c" >"$out/bench_$tag.jsonl" 2>"$out/bench_$tag.log"
  log "exit $?"; tail -17 "$out/bench_$tag.log" | tee -a "$out/summary.txt"
  cat "$out/bench_$tag.jsonl"
}
# The planner on the GPU: its rates and kernel times measured there in bf16 (the block's products
# at GPT-2's shapes on the tensor cores, the 16-bit attention), and the step time it predicts for
# the micro-batch `bench train` measured (B 8, T 1024), to set beside that measurement.
step_plan_bf16() {
  log "plan --model gpt2 --device cuda --precision bf16 --seq 1024 --global-batch 8 --recompute none"
  timeout 60 $tz plan --model gpt2 --device cuda --precision bf16 --device-mem 120GiB \
    --host-mem 32GiB --seq 1024 --global-batch 8 --recompute none >"$out/plan_bf16.log" 2>&1
  log "exit $?"
  grep -E "^(precision|rates|kernels|chosen|why) |compute [0-9.]+ ms" "$out/plan_bf16.log" |
    tee -a "$out/summary.txt"
}
# The asynchronous step's counters on the GPU: host waits per step (--metrics host_waits) and the
# device timeline's compute against the step (the profile's compute track); the logits in
# chunks run here too.
step_waits() {
  local st=$1
  log "train gpt2 cuda B 8 T 1024 stage $st: host waits, device-timed compute"
  echo "{\"train_micro_batch_size_per_gpu\": 8, \"zero_optimization\": {\"stage\": $st},
    \"tierzero\": {\"steps\": 6, \"seq_len\": 1024, \"val_batches\": 0}}" > "$out/waits$st.json"
  timeout 45 $tz train --config "$out/waits$st.json" --model gpt2 --device cuda \
    --metrics "$out/waits$st.jsonl" --profile "$out/prof$st.json" >"$out/train_waits$st.log" 2>&1
  log "exit $?"; tail -3 "$out/train_waits$st.log" | tee -a "$out/summary.txt"
  python3 - "$out/waits$st.jsonl" "$out/prof$st.json" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
print("host_waits", [l["host_waits"] for l in lines], "ms", [round(l["ms"], 1) for l in lines])
steps = json.load(open(sys.argv[2]))["steps"]
print("device compute busy ms", [round(s["tracks"][0][0] * 1e3, 1) for s in steps],
      "spans", [s["tracks"][0][2] for s in steps])
PY
}
# Issue 26's accuracy goal: 300 steps of GPT-2 124M (B 4, T 256, the built-in corpus, clipping
# at 1) with bf16 working parameters and products against the same run in fp32; the mean loss of
# the last 20 steps must agree within 1% (scripts/device/loss_curves.py).
step_curve() {
  local steps=${1:-300}
  for p in fp32 bf16; do
    local extra="" limit=70
    [ "$p" = bf16 ] && extra='"bf16": {"enabled": true},' && limit=50
    echo "{\"train_micro_batch_size_per_gpu\": 4, $extra \"gradient_clipping\": 1.0,
      \"tierzero\": {\"steps\": $steps, \"seq_len\": 256, \"val_batches\": 0}}" >"$out/curve_$p.json"
    log "train gpt2 cuda $p, $steps steps, B 4, T 256 (the loss curve)"
    timeout $limit $tz train --config "$out/curve_$p.json" --model gpt2 --device cuda \
      --metrics "$out/curve_$p.jsonl" >"$out/curve_$p.log" 2>&1
    log "exit $?"; grep -E "^step |error|16-bit compute" "$out/curve_$p.log" | tail -3 |
      tee -a "$out/summary.txt"
  done
  python3 scripts/device/loss_curves.py "$out/curve_fp32.jsonl" "$out/curve_bf16.jsonl" 2>&1 |
    tee -a "$out/summary.txt"
}
# Issue 26's comparison at micro-batch B: ours (bf16 products), PyTorch eager and torch.compile,
# llm.c's train_gpt2cu; `limit` bounds the torch script (compile time included). B "max": the
# largest micro-batch our step fits on the GPU (bench train --batch 0), the peers at the same.
step_peers() {
  local B=$1 torch_limit=${2:-300}
  local ours_batch=$B
  [ "$B" = max ] && ours_batch=0
  log "peers: GPT-2 124M, B $B, T 1024 (ours, PyTorch eager / torch.compile, llm.c)"
  timeout 120 $tz bench train --device cuda --model gpt2 --batch "$ours_batch" --seq 1024 \
    --steps 10 --matmul-precision bf16 >"$out/peer_ours.jsonl" 2>"$out/peer_ours.log"
  log "ours exit $?"
  tail -13 "$out/peer_ours.log" | tee -a "$out/summary.txt"
  if [ "$B" = max ]; then
    B=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["batch"])' \
      "$out/peer_ours.jsonl" 2>/dev/null) || { log "peers: no batch from bench train"; return; }
    log "peers: the largest micro-batch that fits ours is $B"
  fi
  timeout "$torch_limit" python3 scripts/device/peer_gpt2_torch.py --batch "$B" --seq 1024 \
    >"$out/peer_torch.jsonl" 2>"$out/peer_torch.log"; log "torch exit $?"
  grep "^peer torch" "$out/peer_torch.log" | tee -a "$out/summary.txt"
  if [ -x .devpeers/train_gpt2cu ]; then
    python3 scripts/device/llmc_random_shards.py /tmp/llmc_shards
    timeout 180 .devpeers/train_gpt2cu -i '/tmp/llmc_shards/random_train_*.bin' \
      -j '/tmp/llmc_shards/random_val_*.bin' -e d12 -b "$B" -t 1024 -x 30 -v 100000 -s 0 -h 0 \
      >"$out/peer_llmc.log" 2>&1; log "llm.c exit $?"
    grep -E "^step +30/" "$out/peer_llmc.log" | tee -a "$out/summary.txt"
  else
    log "llm.c: .devpeers/train_gpt2cu missing (run scripts/device/peers_prepare.sh and carry .devpeers)"
  fi
  python3 - "$out" "$B" <<'PY' | tee -a "$out/summary.txt"
import json, re, sys
out, B = sys.argv[1], int(sys.argv[2])
tok = {}
try:
    for line in open(f"{out}/peer_ours.jsonl"):
        r = json.loads(line)
        tok["tierzero"] = B * 1024 / (r["step_ms"] / 1e3)
    for line in open(f"{out}/peer_torch.jsonl"):
        r = json.loads(line)
        tok[r["bench"][5:]] = r["value"]
except (OSError, ValueError, KeyError) as e:
    print("peers: incomplete results:", e)
try:
    steps = re.findall(r"\| ([0-9.]+) tok/s", open(f"{out}/peer_llmc.log").read())
    if steps: tok["llmc"] = float(steps[-1])
except OSError:
    pass
for k, v in tok.items():
    print(f"peers: {k:14s} {v:12.0f} tokens/s")
for peer in ("torch_compile", "torch_eager", "llmc"):
    if "tierzero" in tok and peer in tok:
        print(json.dumps({"bench": f"train.vs_{peer}", "value": round(tok["tierzero"], 1),
                          "unit": "tokens/s", "baseline": peer, "baseline_value": tok[peer],
                          "ratio": round(tok["tierzero"] / tok[peer], 4), "batch": B, "seq": 1024}))
PY
}
# Every CUDA test the steps above did not run, as far as `limit` seconds allow.
step_ctest_rest() {
  local limit=${1:-90}
  log "every other CUDA test (ctest, as far as $limit s allow)"
  (cd build/gpu && timeout "$limit" ctest -R "/cuda|Cuda|_cuda" -E "FlashAttentionTest|GradientSumsTest|ElementwiseTest.SumSquares|ElementwiseTest.TransposeBlocks|MatmulPrecisionTest|MatmulGeluTest|Matmul16Test|Norm16Test|Classifier16Test|AdamWTest" \
     -j6 --timeout 120 --output-on-failure --output-junit "$out/junit26.xml") >"$out/ctest26.log" 2>&1
  log "ctest exit $?"; tail -25 "$out/ctest26.log" | tee -a "$out/summary.txt"
}

if [ "$what" = peers ]; then  # issue 26's comparison; pattern: the micro-batch (default 16)
  step_peers "${pattern:-16}"
fi
if [ "$what" = issue26 ]; then
  step_kernels26
  step_sanitize26 memcheck
  step_sanitize26 racecheck
  for p in fp32 tf32 bf16; do step_bench_precision $p; done
  for st in 0 3; do step_waits $st; done
  step_curve 300
  step_ctest_rest 90
fi
if [ "$what" = lease ]; then  # the most telling steps first, each only if its limit still fits
  deadline=$(( $(date +%s) + ${pattern:-500} ))
  fits() {  # fits SECONDS [name]: true when a step of that limit ends before the deadline
    if [ $(( $(date +%s) + $1 )) -le "$deadline" ]; then return 0; fi
    log "skipped ${2:-a step} ($1 s): past the lease's deadline"; return 1
  }
  fits 120 kernels && step_kernels26
  fits 40 "bench bf16" && step_bench_precision bf16
  fits 40 "bench bf16, fp32 activations" && step_bench_precision bf16 8 40 fp32
  fits 60 "plan bf16" && step_plan_bf16
  fits 120 "loss curve" && step_curve 300
  fits 330 "peers B 16" && step_peers 16 150
  fits 90 "bench bf16, the largest micro-batch" && step_bench_precision bf16 0 90
  fits 40 "bench fp32" && step_bench_precision fp32
  fits 160 memcheck && step_sanitize26 memcheck
  fits 45 "waits stage 0" && step_waits 0
  fits 45 "waits stage 3" && step_waits 3
  fits 190 racecheck && step_sanitize26 racecheck
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 30 ] && step_ctest_rest $(( left - 10 ))
fi
log "done"
