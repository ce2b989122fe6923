#!/bin/sh
# Runs a failure case under mpiexec and checks that it ends the way a dead or stalled rank must:
# a non-zero exit, within a time limit (no hang), with at least `min_messages` output lines
# matching `pattern`.
# usage: run_failure_case.sh <max_seconds> <min_messages> <pattern> <command...>
max_seconds=$1; min_messages=$2; pattern=$3; shift 3
log=$(mktemp)
start=$(date +%s%N)
# A hard cap well above the limit, so that a hang fails this test instead of stalling CTest.
timeout -k 5 $((max_seconds * 3)) "$@" > "$log" 2>&1
status=$?
end=$(date +%s%N)
elapsed_ms=$(( (end - start) / 1000000 ))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
cat "$log"
messages=$(grep -c -E "$pattern" "$log")
rm -f "$log"
echo "run_failure_case: exit status $status after ${elapsed} s; $messages line(s) match '$pattern'"
fail=0
if [ "$status" -eq 0 ]; then echo "FAIL: the job exited 0 although a rank failed"; fail=1; fi
if [ "$elapsed_ms" -gt $((max_seconds * 1000)) ]; then
  echo "FAIL: took ${elapsed} s, more than ${max_seconds} s"; fail=1
fi
if [ "$messages" -lt "$min_messages" ]; then
  echo "FAIL: expected at least $min_messages line(s) matching '$pattern'"; fail=1
fi
[ $fail -eq 0 ] && echo "run_failure_case: OK"
exit $fail
