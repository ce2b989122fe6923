#!/bin/sh
# Ranks launched with different settings are refused at start-up (issue 28), with the real binary
# on 2 ranks: an MPMD launch with another --steps per rank, another config file per rank (another
# n_layer, another ZeRO stage), another `eval --batches`, and data globs that match files of
# other sizes. Each must end every rank by itself with exit status 1 (recorded per rank, not the
# launcher's teardown) and one error line naming the setting and both ranks' values, never the
# communication timeout. Ranks that differ only in what may differ per node (--threads,
# --log-level, the data's directory when the files match) must still train.
# usage: run_identity.sh <tierzero> <mpiexec command...>
tierzero=$1; shift
MPI="$*"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# Every rank runs through this wrapper, which records its exit status and exits 0, so the
# launcher never tears down a rank that was still on its way to refusing by itself.
cat > "$dir/rank.sh" <<'SH'
#!/bin/sh
out=$1; shift
"$@"
echo $? > "$out.${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-x}}"
SH
rank() { echo "sh $dir/rank.sh $dir/rc $tierzero"; }

# launch <log> <mpiexec arguments...>: runs a 2-rank job, statuses in $dir/rc.<rank>
launch() {
  log=$1; shift
  rm -f "$dir"/rc.*
  started=$(date +%s)
  timeout -k 5 240 $MPI "$@" > "$log" 2>&1
  echo "  (launch took $(( $(date +%s) - started )) s)"
}
statuses() { echo "$(cat "$dir/rc.0" 2>/dev/null),$(cat "$dir/rc.1" 2>/dev/null)"; }

# refused <what> <expected message> <mpiexec arguments...>
refused() {
  what=$1; expect=$2; shift 2
  echo "$what"
  launch "$dir/out" "$@"
  ok=1
  [ "$(statuses)" = "1,1" ] || { echo "FAIL: $what: rank exit statuses $(statuses), want 1,1"; ok=0; }
  grep -qF "ranks disagree on the run's settings: $expect" "$dir/out" ||
    { echo "FAIL: $what: no line saying '$expect'"; ok=0; }
  [ "$(grep -c 'tierzero: error:' "$dir/out")" = 1 ] ||
    { echo "FAIL: $what: the error is not printed exactly once"; ok=0; }
  if grep -qiE 'timed out|MPI_ABORT|TRUNCATE' "$dir/out"; then
    echo "FAIL: $what: a timeout or an abort instead of a refusal"; ok=0
  fi
  if [ $ok = 1 ]; then grep 'tierzero: error:' "$dir/out"; else cat "$dir/out"; fail=1; fi
}

# trains <what> <mpiexec arguments...>
trains() {
  what=$1; shift
  echo "$what"
  launch "$dir/out" "$@"
  if [ "$(statuses)" != "0,0" ] || grep -q 'ranks disagree' "$dir/out"; then
    echo "FAIL: $what: rank exit statuses $(statuses), want 0,0"; cat "$dir/out"; fail=1
  fi
}

# write_config <file> <stage> <n_layer>
write_config() {
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": $2},
 "tierzero": {"steps": 2, "seq_len": 16, "threads": 1, "val_batches": 1,
              "model": {"vocab_size": 257, "n_layer": $3, "n_head": 2, "n_embd": 32,
                        "context_length": 16}}}
JSON
}
write_config "$dir/base.json" 1 2
write_config "$dir/layers3.json" 1 3
write_config "$dir/stage3.json" 3 2

refused "MPMD launch with another --steps per rank" \
  "tierzero.steps (--steps) is 3 on rank 0 but 4 on rank 1" \
  -n 1 $(rank) train --config "$dir/base.json" --steps 3 : \
  -n 1 $(rank) train --config "$dir/base.json" --steps 4
refused "another config file per rank: n_layer" \
  "tierzero.model.n_layer (--model) is 2 on rank 0 but 3 on rank 1" \
  -n 1 $(rank) train --config "$dir/base.json" : -n 1 $(rank) train --config "$dir/layers3.json"
refused "another config file per rank: ZeRO stage" \
  "zero_optimization.stage is 3 on rank 0 but 1 on rank 1" \
  -n 1 $(rank) train --config "$dir/stage3.json" : -n 1 $(rank) train --config "$dir/base.json"
refused "eval with another --batches per rank" \
  "tierzero.val_batches (--batches) is 1 on rank 0 but 2 on rank 1" \
  -n 1 $(rank) eval --config "$dir/base.json" --batches 1 : \
  -n 1 $(rank) eval --config "$dir/base.json" --batches 2

# Data: a node's copy of the shards at another path is the same data; a shard of another size
# is not.
head -c 30000 /dev/urandom | od -An -tx1 > "$dir/text.txt"
"$tierzero" prepare-data "$dir/text.txt" -o "$dir/a" > /dev/null 2>&1 || { echo "prepare-data failed"; exit 1; }
cp -r "$dir/a" "$dir/copy"
head -c 20000 "$dir/text.txt" > "$dir/short.txt"
"$tierzero" prepare-data "$dir/short.txt" -o "$dir/b" > /dev/null 2>&1 || { echo "prepare-data failed"; exit 1; }
size_a=$(wc -c < "$dir/a/train_000000.bin" | tr -d ' ')
size_b=$(wc -c < "$dir/b/train_000000.bin" | tr -d ' ')
refused "data globs matching shards of other sizes" \
  "tierzero.train_data file 0 (--data) is \"train_000000.bin\" ($size_a bytes) on rank 0 but \"train_000000.bin\" ($size_b bytes) on rank 1" \
  -n 1 $(rank) train --config "$dir/base.json" --data "$dir/a/train_*.bin" : \
  -n 1 $(rank) train --config "$dir/base.json" --data "$dir/b/train_*.bin"

trains "ranks that differ only in per-node settings (threads, log level, data directory) train" \
  -n 1 $(rank) train --config "$dir/base.json" --data "$dir/a/train_*.bin" --threads 1 : \
  -n 1 $(rank) train --config "$dir/base.json" --data "$dir/copy/train_*.bin" --threads 2 \
  --log-level warn
trains "the same launch on both ranks trains" \
  -n 2 $(rank) train --config "$dir/stage3.json"

[ $fail = 0 ] && echo "all identity checks passed"
exit $fail
