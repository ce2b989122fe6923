#!/bin/sh
# Training checkpoints end to end with the real binary (issue 17). <mode> picks the run: ref (one
# rank, the fp32 reference path), zero3_nvme (2 ranks, ZeRO-3, parameters and optimizer on NVMe),
# zero3_host (the same in pinned host memory),
# bf16_zero2 (2 ranks), fp16_zero1 (one rank, dynamic loss scaling that changes scale within the
# run; its learning rate must not advance on the skipped steps), tp2, pp2 (1F1B, 2
# micro-batches), ulysses2 (all 2 ranks, ZeRO-3); reshard (below).
#  1. A 10-step run saves a checkpoint every 5 steps (--save-dir, --save-every 5, --keep-last 2).
#  2. A run resumed from the step-5 checkpoint must give bit-identical results: the same loss and
#     gradient norm bits for steps 6-10, and a byte-identical final llm.c model file.
#  3. (ref only) --keep-last 1 keeps one step directory; a corrupt checkpoint is a clear error
#     naming the file (a flipped byte, a truncated shard, a missing shard, another model, a
#     manifest that is not JSON); a save killed before its rename (its step-N.tmp left behind)
#     leaves the previous checkpoint the one `latest` names, and resuming from it works.
#  4. (ref and zero3_nvme) SIGTERM while training: the run finishes its step, saves, exits 0;
#     resuming it to the end matches an uninterrupted run bit for bit.
# reshard: a checkpoint resumed in another layout, the global batch kept (2 ranks x micro-batch 2
# = 1 rank x 4): 2 ranks ZeRO-3 with NVMe -> 1 rank (the reference path), 1 rank -> 2 ranks
# ZeRO-3 with NVMe, and 2 ranks ZeRO-3 -> ZeRO-0; steps 6-10 must match the uninterrupted run of
# the writer within 1e-5 relative (the reductions' order differs, so not bitwise).
# usage: run_resume.sh <tierzero> <mode> <mpiexec command...>
tierzero=$1; mode=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ranks=2; stage=0; extra=""; args=""
nvme() { echo "{\"device\": \"nvme\", \"nvme_path\": \"$dir\"}"; }
case "$mode" in
  ref) ranks=1 ;;
  zero3_nvme) stage=3; extra=", \"offload_param\": $(nvme), \"offload_optimizer\": $(nvme)" ;;
  zero3_host) stage=3; extra=', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' ;;
  bf16_zero2) stage=2; top=', "bf16": {"enabled": true}' ;;
  # A scale that overflows at steps 1 and 2, doubles every 3 good steps and overflows again
  # after the step-5 checkpoint (at step 6): the scaler's state crosses the checkpoint.
  fp16_zero1) ranks=1; stage=1; top=', "fp16": {"enabled": true, "initial_scale_power": 63, "hysteresis": 1, "loss_scale_window": 3}' ;;
  tp2) args="--tp 2" ;;
  pp2) args="--pp 2 --micro-batches 2" ;;
  ulysses2) stage=3; args="--ulysses 2" ;;
  reshard) ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
# write_config <file> <steps> <n_embd>
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5 ${top:-},
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0 $extra},
 "tierzero": {"steps": $2, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": $3,
                        "context_length": 16}}}
JSON
}
train() {  # train <log> <command...>
  log=$1; shift
  timeout -k 5 180 "$@" > "$log" 2>&1
}
launch() { if [ "$ranks" -gt 1 ]; then echo "$MPI -n $ranks"; fi; }
MPI="$*"
# the loss and gradient norm of steps <from>.. of a metrics file, as written (full precision)
steps_from() { awk -v from="$1" -F',' '{ split($1, s, ":"); if (s[2] + 0 >= from) print $1 "," $2 "," $4 }' "$2"; }

if [ "$mode" = reshard ]; then
  # close <what> <reference metrics> <candidate metrics>: steps 6-10 within 1e-5 relative
  close() {
    steps_from 6 "$2" | sed 's/[^0-9.e, -]//g' > "$dir/c.a"; steps_from 6 "$3" | sed 's/[^0-9.e, -]//g' > "$dir/c.b"
    paste -d, "$dir/c.a" "$dir/c.b" | awk -F, -v what="$1" '
      function abs(v) { return v < 0 ? -v : v }
      { n++; for (i = 2; i <= 3; i++) { r = abs($i - $(i + 3)) / abs($i); if (r > m) m = r } }
      END { printf "%s: steps 6-10 max rel err %.3g over %d steps (tolerance 1e-5)\n", what, m, n;
            exit (n == 5 && m <= 1e-5) ? 0 : 1 }' || { echo "FAIL: $1"; fail=1; }
  }
  top=""
  stage=3; extra=", \"offload_param\": $(nvme), \"offload_optimizer\": $(nvme)"
  write_config "$dir/z3.json" 10 64
  stage=0; extra=""
  write_config "$dir/z0.json" 10 64
  sed 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4/' "$dir/z0.json" > "$dir/one.json"
  timeout -k 5 180 $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --save-dir "$dir/two" \
    --save-every 5 --metrics "$dir/two.jsonl" > "$dir/two.out" 2>&1 || { cat "$dir/two.out"; exit 1; }
  timeout -k 5 180 "$tierzero" train --config "$dir/one.json" --resume "$dir/two/step-00000005" \
    --metrics "$dir/two_to_one.jsonl" > "$dir/t.out" 2>&1 || { cat "$dir/t.out"; exit 1; }
  grep "resharded" "$dir/t.out"
  close "2 ranks ZeRO-3 NVMe -> 1 rank" "$dir/two.jsonl" "$dir/two_to_one.jsonl"
  timeout -k 5 180 $MPI -n 2 "$tierzero" train --config "$dir/z0.json" --resume "$dir/two/step-00000005" \
    --metrics "$dir/z3_to_z0.jsonl" > "$dir/t.out" 2>&1 || { cat "$dir/t.out"; exit 1; }
  close "2 ranks ZeRO-3 NVMe -> 2 ranks ZeRO-0" "$dir/two.jsonl" "$dir/z3_to_z0.jsonl"
  timeout -k 5 180 "$tierzero" train --config "$dir/one.json" --save-dir "$dir/one" \
    --save-every 5 --metrics "$dir/one.jsonl" > "$dir/one.out" 2>&1 || { cat "$dir/one.out"; exit 1; }
  timeout -k 5 180 $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --resume "$dir/one" \
    --metrics "$dir/one_to_two.jsonl" > "$dir/t.out" 2>&1 || { cat "$dir/t.out"; exit 1; }
  grep -q "resumed after step 10" "$dir/t.out" && echo "(latest is step 10: resumed at the end)"
  timeout -k 5 180 $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --resume "$dir/one/step-00000005" \
    --metrics "$dir/one_to_two.jsonl" > "$dir/t.out" 2>&1 || { cat "$dir/t.out"; exit 1; }
  close "1 rank -> 2 ranks ZeRO-3 NVMe" "$dir/one.jsonl" "$dir/one_to_two.jsonl"
  [ $fail -eq 0 ] && echo "run_resume: OK"
  exit $fail
fi

write_config "$dir/run.json" 10 64
echo "== $mode: 10 steps, a checkpoint every 5 ($(launch) $args)"
train "$dir/full.out" $(launch) "$tierzero" train --config "$dir/run.json" $args --save-dir "$dir/ck" \
  --save-every 5 --keep-last 2 --metrics "$dir/full.jsonl" --save "$dir/full.bin" || { cat "$dir/full.out"; exit 1; }
grep "saved training checkpoint" "$dir/full.out"
ls "$dir/ck"
[ -d "$dir/ck/step-00000005" ] && [ -d "$dir/ck/step-00000010" ] || { echo "FAIL: step directories missing"; fail=1; }
[ "$(cat "$dir/ck/latest")" = "step-00000010" ] || { echo "FAIL: latest is not step-00000010"; fail=1; }

echo "== resumed from step 5"
train "$dir/res.out" $(launch) "$tierzero" train --config "$dir/run.json" $args \
  --resume "$dir/ck/step-00000005" --metrics "$dir/res.jsonl" --save "$dir/res.bin" || { cat "$dir/res.out"; exit 1; }
grep "resumed after step" "$dir/res.out" || { echo "FAIL: no resume line"; fail=1; }
steps_from 6 "$dir/full.jsonl" > "$dir/full.steps"
steps_from 6 "$dir/res.jsonl" > "$dir/res.steps"
paste -d '|' "$dir/full.steps" "$dir/res.steps"
if [ "$(wc -l < "$dir/res.steps")" -ne 5 ] || ! cmp -s "$dir/full.steps" "$dir/res.steps"; then
  echo "FAIL: steps 6-10 differ from the uninterrupted run"; fail=1
else
  echo "steps 6-10: loss and gradient norm bit-identical to the uninterrupted run"
fi
if [ "$mode" = fp16_zero1 ]; then
  grep "gradient overflow" "$dir/full.out" "$dir/res.out"
  skipped_after_5() { sed -n 's/^step \([0-9]*\): gradient overflow.*/\1/p' "$1" | awk '$1 > 5'; }
  skipped_after_5 "$dir/full.out" > "$dir/skip.full"
  skipped_after_5 "$dir/res.out" > "$dir/skip.res"
  if [ ! -s "$dir/skip.full" ] || ! cmp -s "$dir/skip.full" "$dir/skip.res"; then
    echo "FAIL: the resumed run did not skip the steps after 5 that the uninterrupted one skipped"
    fail=1
  fi
  # The learning rate follows the optimizer's steps, as DeepSpeed's scheduler does: a skipped step
  # does not advance it (the step after it runs at the same rate); any other step does (the
  # schedule is still warming up over these 10 steps).
  sed -n 's/.*"step": *\([0-9]*\),.*"lr": *\([^,]*\),.*/\1 \2/p' "$dir/full.jsonl" > "$dir/lr.txt"
  sed -n 's/^step \([0-9]*\): gradient overflow.*/\1/p' "$dir/full.out" > "$dir/skipped.txt"
  echo "learning rate per step (skipped: $(tr '\n' ' ' < "$dir/skipped.txt")):"
  awk 'NR == FNR { skipped[$1] = 1; next }
       { if (n && (skipped[prev] ? $2 != lr : $2 <= lr)) { bad = 1; print "  step " $1 ": lr " $2 " after step " prev " (" (skipped[prev] ? "skipped" : "taken") ") at lr " lr " <- wrong" }
         else print "  step " $1 ": lr " $2; prev = $1; lr = $2; n++ }
       END { exit (n == 10 && !bad) ? 0 : 1 }' "$dir/skipped.txt" "$dir/lr.txt" ||
    { echo "FAIL: the learning rate advanced on a skipped step (or stood still on a taken one)"; fail=1; }
fi
if cmp "$dir/full.bin" "$dir/res.bin"; then echo "final model: byte-identical"; else echo "FAIL: final model differs"; fail=1; fi

expect_error() {  # expect_error <name> <text> <resume path> [config]
  train "$dir/$1.out" "$tierzero" train --config "${4:-$dir/run.json}" --resume "$3"
  rc=$?
  echo "-- $1 (exit $rc): $(grep "error" "$dir/$1.out" | head -n 1)"
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -q "$2" "$dir/$1.out"; then
    echo "FAIL: $1 should fail with \"$2\""; fail=1
  fi
  if grep -q "^step " "$dir/$1.out"; then echo "FAIL: $1 trained"; fail=1; fi
}

if [ "$mode" = ref ]; then
  echo "== keep_last 1"
  train "$dir/keep.out" "$tierzero" train --config "$dir/run.json" --save-dir "$dir/keep" \
    --save-every 2 --keep-last 1 || { cat "$dir/keep.out"; exit 1; }
  ls "$dir/keep"
  [ "$(ls -d "$dir"/keep/step-* | wc -l)" -eq 1 ] && [ -d "$dir/keep/step-00000010" ] ||
    { echo "FAIL: keep_last 1 kept $(ls -d "$dir"/keep/step-* | wc -l) directories"; fail=1; }

  echo "== bad checkpoints"
  good="$dir/ck/step-00000005"
  cp -r "$good" "$dir/flip"
  printf '\377' | dd of="$dir/flip/rank-00000.bin" bs=1 seek=1000 count=1 conv=notrunc 2>/dev/null
  expect_error flipped "rank-00000.bin': block .* fails its CRC32C check" "$dir/flip"
  cp -r "$good" "$dir/trunc"
  truncate -s -100 "$dir/trunc/rank-00000.bin"
  expect_error truncated "rank-00000.bin' has .* bytes, its manifest says" "$dir/trunc"
  cp -r "$good" "$dir/missing"
  rm "$dir/missing/rank-00000.bin"
  expect_error missing "rank-00000.bin' is missing" "$dir/missing"
  cp -r "$good" "$dir/badjson"
  echo "{ not json" > "$dir/badjson/manifest.json"
  expect_error bad_manifest "manifest.json' is not valid JSON" "$dir/badjson"
  write_config "$dir/other.json" 10 32
  expect_error other_model "was written with model = " "$good" "$dir/other.json"

  echo "== a save killed before its rename"
  # What a kill -9 in the middle of saving step 10 leaves: its .tmp directory, partly written;
  # latest still names step 5.
  mkdir -p "$dir/crash" && cp -r "$good" "$dir/crash/step-00000005" && echo step-00000005 > "$dir/crash/latest"
  mkdir "$dir/crash/step-00000010.tmp" && head -c 5000 "$dir/ck/step-00000010/rank-00000.bin" > "$dir/crash/step-00000010.tmp/rank-00000.bin"
  train "$dir/crash.out" "$tierzero" train --config "$dir/run.json" --resume "$dir/crash" \
    --metrics "$dir/crash.jsonl" || { cat "$dir/crash.out"; fail=1; }
  steps_from 6 "$dir/crash.jsonl" > "$dir/crash.steps"
  cmp -s "$dir/full.steps" "$dir/crash.steps" && echo "resumed from the previous checkpoint: steps 6-10 bit-identical" ||
    { echo "FAIL: resuming past a crashed save"; fail=1; }
fi

if [ "$mode" = ref ] || [ "$mode" = zero3_nvme ]; then
  echo "== SIGTERM while training"
  write_config "$dir/long.json" 2000 64
  train "$dir/long_full.out" $(launch) "$tierzero" train --config "$dir/long.json" $args \
    --metrics "$dir/long_full.jsonl" || { cat "$dir/long_full.out"; exit 1; }
  $(launch) "$tierzero" train --config "$dir/long.json" $args --save-dir "$dir/term" \
    --metrics "$dir/term.jsonl" > "$dir/term.out" 2>&1 &
  pid=$!
  i=0
  while [ "$(cat "$dir/term.jsonl" 2>/dev/null | wc -l)" -lt 5 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  # One rank: the trainer itself. Under mpiexec: its ranks (mpiexec would follow up with SIGKILL).
  if [ "$ranks" -gt 1 ]; then pkill -TERM -P $pid; else kill -TERM $pid; fi
  wait $pid
  rc=$?
  grep "stopping after step\|saved training checkpoint" "$dir/term.out"
  stopped=$(sed -n 's/.*stopping after step \([0-9]*\).*/\1/p' "$dir/term.out")
  if [ $rc -ne 0 ] || [ -z "$stopped" ]; then
    echo "FAIL: SIGTERM: exit $rc, no stop line"; tail -5 "$dir/term.out"; fail=1
  elif [ "$stopped" -ge 2000 ]; then
    echo "note: the run ended before the signal; nothing to resume"
  else
    train "$dir/term_res.out" $(launch) "$tierzero" train --config "$dir/long.json" $args \
      --resume "$dir/term" --metrics "$dir/term_res.jsonl" || { cat "$dir/term_res.out"; exit 1; }
    steps_from $((stopped + 1)) "$dir/long_full.jsonl" > "$dir/a.steps"
    steps_from $((stopped + 1)) "$dir/term_res.jsonl" > "$dir/b.steps"
    if cmp -s "$dir/a.steps" "$dir/b.steps" && [ -s "$dir/a.steps" ]; then
      echo "stopped after step $stopped by SIGTERM (exit 0), resumed: steps $((stopped + 1))-2000 bit-identical"
    else
      echo "FAIL: the resumed run differs after step $stopped"; fail=1
    fi
  fi
fi
if [ "$mode" = ref ]; then
  echo "== SIGINT with --save and no --save-dir"
  # No training checkpoint to save: the run still ends after its step and writes --save, where
  # the signal used to end the process with nothing written and nothing said.
  write_config "$dir/long.json" 2000 64
  rm -f "$dir/int.bin"
  "$tierzero" train --config "$dir/long.json" $args --save "$dir/int.bin" \
    --metrics "$dir/int.jsonl" > "$dir/int.out" 2>&1 &
  pid=$!
  i=0
  while [ "$(cat "$dir/int.jsonl" 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  kill -INT $pid
  wait $pid
  rc=$?
  grep "stopping after step" "$dir/int.out"
  if [ $rc -ne 0 ] || ! grep -q "stopping after step" "$dir/int.out" || [ ! -s "$dir/int.bin" ]; then
    echo "FAIL: SIGINT with --save: exit $rc"; tail -5 "$dir/int.out"; ls -l "$dir/int.bin"; fail=1
  elif ! "$tierzero" eval --config "$dir/long.json" --load "$dir/int.bin" --batches 1 > "$dir/int_eval.out" 2>&1; then
    echo "FAIL: the model --save wrote on SIGINT does not load"; tail -3 "$dir/int_eval.out"; fail=1
  else
    echo "SIGINT: stopped after a step (exit 0), the --save model written and loadable"
  fi
fi
[ $fail -eq 0 ] && echo "run_resume: OK"
exit $fail
