#!/bin/sh
# Bad tensor-, pipeline- and Ulysses-parallel settings are a clear error before any rank allocates
# (issues 14, 15, 16): each case
# must exit non-zero within the time limit, print the expected message, and print no step (the
# trainer checks the split right after reading the config, before data, device and model); every
# rank fails alike, so the message comes once (rank 0), with no MPI abort and no source location
# (issue 29).
# usage: run_tp_errors.sh <tierzero> <mpiexec command...>
tierzero=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# A config file that does not read is reported by each rank, before MPI starts: a file that
# differs between nodes must not hide its rank's message.
config_error() { case "$1" in pp_list_len|pp_schedule) return 0 ;; esac; return 1; }

# expect <name> <ranks> <expected text> <tp> <sp> <micro_batch> <seq_len> <n_head> <vocab>
#        [<n_layer> <more tierzero keys> <more top-level keys>]
expect() {
  cat > "$dir/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": $6 ${12},
 "tierzero": {"steps": 2, "seq_len": $7, "threads": 1, "tensor_parallel": $4,
              "sequence_parallel": $5 ${11},
              "model": {"vocab_size": $9, "n_layer": ${10:-1}, "n_head": $8, "n_embd": 48,
                        "context_length": 16}}}
JSON
  if [ "$2" -gt 1 ]; then
    timeout -k 5 60 "$MPI" -n "$2" "$tierzero" train --config "$dir/$1.json" > "$dir/$1.out" 2>&1
  else
    timeout -k 5 60 "$tierzero" train --config "$dir/$1.json" > "$dir/$1.out" 2>&1
  fi
  rc=$?
  echo "== $1 (exit $rc):"
  grep -v "^--\|^$\|MPI_ABORT\|NOTE:\|You may\|exactly when\|with errorcode\|^[[:space:]]*$" "$dir/$1.out" | head -4
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL: $1 exited $rc (expected a clean error)"; fail=1
  elif ! grep -q "$3" "$dir/$1.out"; then
    echo "FAIL: $1 did not say \"$3\""; fail=1
  elif grep -q "^step " "$dir/$1.out"; then
    echo "FAIL: $1 trained before failing"; fail=1
  elif [ "$(grep -c "tierzero: error: " "$dir/$1.out")" -ne 1 ] && ! config_error "$1"; then
    # every rank fails alike at start-up: rank 0 says it, once
    echo "FAIL: $1 printed the error $(grep -c "tierzero: error: " "$dir/$1.out") times"; fail=1
  elif grep -q "MPI_ABORT\|\[at [a-z_]*\.cpp" "$dir/$1.out"; then
    echo "FAIL: $1 aborted the job or showed a source location"; fail=1
  fi
}
MPI="$1"; shift
# name              ranks text                                        tp sp    B  T  heads vocab
expect tp_not_world 3     "does not divide the 3 rank(s)"             2  false 2 16  4    257
expect tp_one_rank  1     "does not divide the 1 rank(s)"             2  false 2 16  4    257
expect heads        2     "n_head 3 is not divisible by tensor_parallel 2"  2  false 2 16  3    257
expect sp_tokens    2     "tokens (micro-batch 1 x seq_len 3)"        2  true  1  3  4    257
# 400 pads to 512, which 3 does not divide
expect vocab        3     "the padded vocabulary 512 (vocab_size rounded up" 3 false 2 16 3 400
# Pipeline parallelism: the world, the blocks, the stage list and the schedule.
expect pp_not_world 3     "x pipeline_parallel 2 does not divide the 3 rank(s)" 1 false 2 16 4 257 2 ', "pipeline_parallel": 2'
expect pp_blocks    2     "pipeline_parallel 2 exceeds the model's 1 transformer blocks" 1 false 2 16 4 257 1 ', "pipeline_parallel": 2'
expect pp_list_sum  2     "pipeline_stages" 1 false 2 16 4 257 3 ', "pipeline_parallel": 2, "pipeline_stages": [1, 1]'
expect pp_list_len  2     "pipeline_stages" 1 false 2 16 4 257 3 ', "pipeline_parallel": 2, "pipeline_stages": [3]'
expect pp_interleaved_v1 2 "interleaved needs tierzero.pipeline_virtual_stages >= 2" 1 false 2 16 4 257 4 ', "pipeline_parallel": 2, "pipeline_schedule": "interleaved"'
expect pp_virtual_1f1b 2  "pipeline_virtual_stages 2 needs pipeline_schedule interleaved" 1 false 2 16 4 257 4 ', "pipeline_parallel": 2, "pipeline_virtual_stages": 2'
expect pp_virtual_blocks 2 "= 6 virtual stages exceed the model's 4 transformer blocks" 1 false 2 16 4 257 4 ', "pipeline_parallel": 2, "pipeline_schedule": "interleaved", "pipeline_virtual_stages": 3'
expect pp_interleaved_m 2 "gradient_accumulation_steps 3 is not a multiple" 1 false 2 16 4 257 4 ', "pipeline_parallel": 2, "pipeline_schedule": "interleaved", "pipeline_virtual_stages": 2' ', "gradient_accumulation_steps": 3'
expect pp_schedule  2     "pipeline_schedule" 1 false 2 16 4 257 2 ', "pipeline_parallel": 2, "pipeline_schedule": "zigzag"'
# Ulysses: the heads, the sequence, the world, and the combinations not built.
expect ulysses_heads 3    "ulysses_parallel 3 does not divide the model's 4 attention heads" 1 false 2 12 4 257 1 ', "ulysses_parallel": 3'
expect ulysses_seq  2     "ulysses_parallel 2 does not divide seq_len 15" 1 false 2 15 4 257 1 ', "ulysses_parallel": 2'
expect ulysses_world 3    "ulysses_parallel 2 does not divide the 3 rank(s)" 1 false 2 16 4 257 1 ', "ulysses_parallel": 2'
expect ulysses_one_rank 1 "ulysses_parallel 2 does not divide the 1 rank(s)" 1 false 2 16 4 257 1 ', "ulysses_parallel": 2'
expect ulysses_tp   4     "ulysses_parallel 2 with tensor_parallel 2" 2 false 2 16 4 257 1 ', "ulysses_parallel": 2'
expect ulysses_pp   4     "ulysses_parallel 2 with tensor_parallel 1 and pipeline_parallel 2" 1 false 2 16 4 257 2 ', "ulysses_parallel": 2, "pipeline_parallel": 2'
[ $fail -eq 0 ] && echo "run_tp_errors: OK"
exit $fail
