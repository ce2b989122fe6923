#!/bin/sh
# Training checkpoints against hostile use, end to end with the real binary (issue 28).
# one (one rank, no MPI):
#  1. Rotation: a save directory holding steps 2 and 4; a run resumed from step 2 with
#     --keep-last 1 saves step 3, which stays and is `latest`; step 4 (the abandoned run's) and 2
#     go, with a warning at the start; a user's step-0000000/ and a step directory without a
#     manifest stay.
#  2. Two runs on one --save-dir: the second is refused at its start (no step), naming the lock
#     file and the first's pid; the first's checkpoint is whole. A run killed with SIGKILL leaves
#     its lock, which the next run takes over with a warning.
#  3. Forged manifests (optimizer_steps 2^62, step -5, a negative block offset): resume and
#     export refuse them naming the file and the field.
#  4. export -o into the checkpoint is refused and the checkpoint still resumes; an export that
#     fails half way (a corrupt block) leaves no file behind.
# mpi (2 ranks):
#  5. A 2-rank checkpoint without rank 1's files: resume (2 ranks, and 1 rank resharding) and
#     export fail naming rank 1's file, said once; no output is written. A checkpoint of another
#     batch is refused, said once.
#  6. Two 2-rank runs on one --save-dir: every rank of the second stops at once (no hang).
# usage: run_ckpt_robust.sh <tierzero> one|mpi <mpiexec command...>
tierzero=$1; mode=$2; shift 2
MPI="$*"
dir=$(mktemp -d)
trap 'kill -9 $bg 2>/dev/null; rm -rf "$dir"' EXIT
bg=""
fail=0
cat > "$dir/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0},
 "tierzero": {"steps": 4, "seq_len": 16, "seed": 7, "threads": 1, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 2, "n_head": 4, "n_embd": 32,
                        "context_length": 16}}}
JSON
sed 's/"stage": 0/"stage": 3/' "$dir/run.json" > "$dir/z3.json"
run() {  # run <log> <command...>: the exit status, the output in <log>
  log=$1; shift
  timeout -k 5 120 "$@" > "$log" 2>&1
}
# expect_fail <name> <text> <log> <status>: failed (not by the timeout), said <text>, trained nothing
expect_fail() {
  echo "-- $1 (exit $4): $(grep -m1 "error" "$3")"
  if [ "$4" -eq 0 ] || [ "$4" -ge 124 ] || ! grep -q -- "$2" "$3"; then
    echo "FAIL: $1 should fail saying \"$2\""; cat "$3" | tail -5; fail=1
  fi
  if grep -q "^step " "$3"; then echo "FAIL: $1 trained"; fail=1; fi
}
wait_lock() {  # wait_lock <save dir> <log>: until a run holds it (its lock file names it) and trains
  i=0
  while { ! grep -q "pid=" "$1/tierzero.lock" || ! grep -q "^step" "$2"; } 2>/dev/null && [ $i -lt 1200 ]; do
    sleep 0.1; i=$((i + 1))
  done
}
forge() {  # forge <from> <to> <file> <python expression on j>
  mkdir -p "$(dirname "$2")" && cp -r "$1" "$2"
  python3 - "$2/$3" "$4" <<'PY'
import json, sys
path, expr = sys.argv[1], sys.argv[2]
j = json.load(open(path))
exec(expr)
open(path, "w").write(json.dumps(j))
PY
}

if [ "$mode" = one ]; then
  echo "== 1. rotation after resuming below the latest step"
  run "$dir/a.out" "$tierzero" train --config "$dir/run.json" --save-dir "$dir/ck" --save-every 2 ||
    { cat "$dir/a.out"; exit 1; }
  mkdir "$dir/ck/step-0000000" "$dir/ck/step-00000009" && echo mine > "$dir/ck/step-00000009/notes"
  run "$dir/b.out" "$tierzero" train --config "$dir/run.json" --steps 3 \
    --resume "$dir/ck/step-00000002" --save-dir "$dir/ck" --keep-last 1 || { cat "$dir/b.out"; exit 1; }
  grep "warn" "$dir/b.out"
  echo "left: $(ls "$dir/ck" | tr '\n' ' '); latest: $(cat "$dir/ck/latest")"
  [ "$(cat "$dir/ck/latest")" = step-00000003 ] && [ -f "$dir/ck/step-00000003/manifest.json" ] ||
    { echo "FAIL: latest does not name the step just written"; fail=1; }
  [ ! -e "$dir/ck/step-00000002" ] && [ ! -e "$dir/ck/step-00000004" ] ||
    { echo "FAIL: --keep-last 1 kept an older checkpoint"; fail=1; }
  [ -d "$dir/ck/step-0000000" ] && [ -f "$dir/ck/step-00000009/notes" ] ||
    { echo "FAIL: rotation removed a directory that is not a checkpoint"; fail=1; }
  grep -q "holds checkpoints of steps after 2.*step-00000004" "$dir/b.out" ||
    { echo "FAIL: no warning about the abandoned run's step 4"; fail=1; }
  run "$dir/c.out" "$tierzero" train --config "$dir/run.json" --resume "$dir/ck" ||
    { echo "FAIL: resuming from latest"; cat "$dir/c.out"; fail=1; }

  echo "== 2. two runs on one save directory"
  "$tierzero" train --config "$dir/run.json" --steps 100000 --save-dir "$dir/busy" > "$dir/first.out" 2>&1 &
  bg=$!
  wait_lock "$dir/busy" "$dir/first.out"
  run "$dir/second.out" "$tierzero" train --config "$dir/run.json" --save-dir "$dir/busy"
  expect_fail second_run "tierzero.lock' is held by pid $bg on host" "$dir/second.out" $?
  kill -TERM $bg; wait $bg; rc=$?
  grep "stopping after step" "$dir/first.out" || { echo "FAIL: the first run (exit $rc) did not save on SIGTERM"; fail=1; }
  stopped=$(sed -n 's/.*stopping after step \([0-9]*\).*/\1/p' "$dir/first.out")
  run "$dir/after.out" "$tierzero" train --config "$dir/run.json" --steps $((stopped + 1)) --resume "$dir/busy" ||
    { echo "FAIL: the first run's checkpoint does not resume"; cat "$dir/after.out"; fail=1; }
  "$tierzero" train --config "$dir/run.json" --steps 100000 --save-dir "$dir/busy" > "$dir/killed.out" 2>&1 &
  bg=$!
  wait_lock "$dir/busy" "$dir/killed.out"
  kill -9 $bg; wait $bg 2>/dev/null; bg=""
  run "$dir/takeover.out" "$tierzero" train --config "$dir/run.json" --save-dir "$dir/busy" ||
    { echo "FAIL: a dead run's lock was not taken over"; cat "$dir/takeover.out"; fail=1; }
  grep "stale lock" "$dir/takeover.out" || { echo "FAIL: no warning on taking over a stale lock"; fail=1; }

  echo "== 3. forged manifests"
  good="$dir/ck/step-00000003"
  forge "$good" "$dir/f1/step-00000003" manifest.json 'j["optimizer_steps"] = 2**62'
  run "$dir/f1.out" "$tierzero" train --config "$dir/run.json" --resume "$dir/f1/step-00000003"
  expect_fail optimizer_steps "manifest.json': field 'optimizer_steps' is 4611686018427387904; expected an integer in \[0, 3\]" "$dir/f1.out" $?
  run "$dir/f1e.out" "$tierzero" export "$dir/f1/step-00000003" -o "$dir/f1.safetensors"
  expect_fail export_optimizer_steps "field 'optimizer_steps'" "$dir/f1e.out" $?
  forge "$good" "$dir/f2/step-00000003" manifest.json 'j["step"] = -5'
  run "$dir/f2.out" "$tierzero" train --config "$dir/run.json" --resume "$dir/f2/step-00000003"
  expect_fail step "field 'step' is -5; expected an integer in \[0, " "$dir/f2.out" $?
  forge "$good" "$dir/f3/step-00000003" rank-00000.json 'j["blocks"][2]["offset"] = -8'
  run "$dir/f3.out" "$tierzero" train --config "$dir/run.json" --resume "$dir/f3/step-00000003"
  expect_fail offset "rank-00000.json': field 'blocks\[2\].offset' is -8" "$dir/f3.out" $?
  run "$dir/f3e.out" "$tierzero" export "$dir/f3/step-00000003" -o "$dir/f3.safetensors"
  expect_fail export_offset "field 'blocks\[2\].offset' is -8" "$dir/f3e.out" $?

  echo "== 4. export's output"
  sum=$(cat "$good"/* | md5sum)
  for out in "$good/rank-00000.bin" "$good/new.safetensors" "$dir/ck/latest" "$dir/ck"; do
    run "$dir/e.out" "$tierzero" export "$dir/ck" -o "$out"
    expect_fail "export -o $out" "export output" "$dir/e.out" $?
  done
  [ "$(cat "$good"/* | md5sum)" = "$sum" ] && [ ! -e "$good/new.safetensors" ] ||
    { echo "FAIL: a refused export changed the checkpoint"; fail=1; }
  run "$dir/e.out" "$tierzero" export "$dir/ck" -o "$dir/model.safetensors" ||
    { echo "FAIL: export"; cat "$dir/e.out"; fail=1; }
  cp -r "$good" "$dir/bad"
  # Inside the last unit's parameters: export fails at its last tensor, its output half written.
  at=$(python3 -c 'import json, sys; b = [b for b in json.load(open(sys.argv[1]))["blocks"] if b["kind"] == "params_full"][-1]; print(b["offset"] + b["bytes"] // 2)' "$dir/bad/rank-00000.json")
  printf '\377\377\377\377' | dd of="$dir/bad/rank-00000.bin" bs=1 seek="$at" conv=notrunc 2>/dev/null
  run "$dir/e.out" "$tierzero" export "$dir/bad" -o "$dir/half.safetensors"
  expect_fail export_corrupt "fails its CRC32C check" "$dir/e.out" $?
  [ -z "$(ls "$dir" | grep half)" ] || { echo "FAIL: a failed export left $(ls "$dir" | grep half)"; fail=1; }
fi

if [ "$mode" = mpi ]; then
  echo "== 5. a 2-rank checkpoint missing rank 1's files"
  run "$dir/two.out" $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --save-dir "$dir/two" ||
    { cat "$dir/two.out"; exit 1; }
  cp -r "$dir/two/step-00000004" "$dir/part"
  rm "$dir/part/rank-00001.json" "$dir/part/rank-00001.bin"
  run "$dir/r2.out" $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --resume "$dir/part"
  expect_fail resume_2_ranks "lacks rank 1's files: '.*rank-00001.json' is missing" "$dir/r2.out" $?
  # Every rank meets it alike: said once, not once per rank.
  [ "$(grep -c "lacks rank 1's files" "$dir/r2.out")" -eq 1 ] ||
    { echo "FAIL: the error was said $(grep -c "lacks rank 1's files" "$dir/r2.out") times"; fail=1; }
  # A checkpoint of another batch: refused once too.
  sed 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 3/' "$dir/z3.json" > "$dir/b3.json"
  run "$dir/rb.out" $MPI -n 2 "$tierzero" train --config "$dir/b3.json" --resume "$dir/two"
  expect_fail resume_other_batch "this run has" "$dir/rb.out" $?
  [ "$(grep -c "this run has" "$dir/rb.out")" -eq 1 ] ||
    { echo "FAIL: the mismatch was said $(grep -c "this run has" "$dir/rb.out") times"; fail=1; }
  sed 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4/' "$dir/z3.json" > "$dir/one.json"
  run "$dir/r1.out" "$tierzero" train --config "$dir/one.json" --resume "$dir/part"
  expect_fail resume_1_rank "lacks rank 1's files" "$dir/r1.out" $?
  run "$dir/ex.out" "$tierzero" export "$dir/part" -o "$dir/part.safetensors"
  expect_fail export "lacks rank 1's files: '.*rank-00001.json' is missing" "$dir/ex.out" $?
  [ ! -e "$dir/part.safetensors" ] || { echo "FAIL: export wrote a file"; fail=1; }
  run "$dir/ok.out" "$tierzero" export "$dir/two" -o "$dir/two.safetensors" ||
    { echo "FAIL: export of the whole checkpoint"; cat "$dir/ok.out"; fail=1; }

  # A mistyped flag under mpiexec: every rank parses it, rank 0 says it.
  run "$dir/flag.out" $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --bogus-flag
  [ "$(grep -c "bogus-flag" "$dir/flag.out")" -eq 1 ] ||
    { echo "FAIL: the flag error was said $(grep -c "bogus-flag" "$dir/flag.out") times"; fail=1; }

  echo "== 6. two 2-rank runs on one save directory"
  $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --steps 100000 --save-dir "$dir/busy" > "$dir/first.out" 2>&1 &
  bg=$!
  wait_lock "$dir/busy" "$dir/first.out"
  run "$dir/second.out" $MPI -n 2 "$tierzero" train --config "$dir/z3.json" --save-dir "$dir/busy"
  expect_fail second_run "tierzero.lock' is held by pid [0-9]* on host" "$dir/second.out" $?
  pkill -TERM -P $bg; wait $bg
  grep "stopping after step" "$dir/first.out" || { echo "FAIL: the first run did not save on SIGTERM"; fail=1; }
  bg=""
fi
[ $fail -eq 0 ] && echo "run_ckpt_robust: OK"
exit $fail
