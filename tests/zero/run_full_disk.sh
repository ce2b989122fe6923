#!/bin/sh
# A real full disk under NVMe offload: `tierzero train` on 2 ranks (mpiexec) at stage 3 with
# parameters and optimizer states swapped to a 6 MiB tmpfs, while each rank needs about 25 MB
# there. The job must stop within the timeout (no hang) with an error naming ENOSPC, the file and
# offset, and the remedy, and the swap files must be gone afterwards (nothing left to fill the
# drive). Here the drive fills while the store is built, so every rank unwinds and removes its
# swap; a rank that meets ENOSPC mid-step aborts the job instead (the others may be inside a
# collective), and the next run on the drive removes what it left (see docs/offload.md). The tmpfs is a real filesystem that runs out of space (ENOSPC), unlike the
# offload tests' RLIMIT_FSIZE (EFBIG). Mounting needs root where mounts are allowed; elsewhere
# the test says SKIP and CTest reports it skipped.
# usage: run_full_disk.sh <tierzero> <mpiexec> [mpiexec args...]
tierzero=$1; shift
dir=$(mktemp -d)
mnt="$dir/small"
mkdir "$mnt"
mounted=false
# Removes the directory only once the tmpfs is gone: never recurse into a mount that is still there.
cleanup() {
  if $mounted && ! umount "$mnt"; then
    echo "warning: could not unmount $mnt; left it and $dir in place"
    return
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
if ! mount -t tmpfs -o size=6M tmpfs "$mnt" 2>/dev/null; then
  echo "SKIP: cannot mount a 6 MiB tmpfs here (needs root where mounts are allowed)"
  exit 0
fi
mounted=true
where="{\"device\": \"nvme\", \"nvme_path\": \"$mnt\"}"
cat > "$dir/full.json" <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                       "offload_param": $where, "offload_optimizer": $where},
 "tierzero": {"steps": 3, "seq_len": 32, "val_batches": 0,
              "model": {"vocab_size": 257, "n_layer": 4, "n_head": 4, "n_embd": 256,
                        "context_length": 32}}}
JSON
timeout -k 5 120 "$@" "$tierzero" train --config "$dir/full.json" --threads 1 > "$dir/log" 2>&1
rc=$?
cat "$dir/log"
fail() { echo "FAIL: $1"; exit 1; }
[ "$rc" -ne 0 ] || fail "training on a full disk exited 0"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "training on a full disk did not end within 120 s (rc $rc)"
grep -q "error: NVMe write failed: No space left on device" "$dir/log" ||
  fail "no error naming the failed NVMe write and ENOSPC"
grep -q "file $mnt/.*offset" "$dir/log" || fail "the error does not name the swap file and offset"
grep -q "hint: the swap drive is full" "$dir/log" || fail "the error gives no remedy"
left=$(find "$mnt" -mindepth 1 | head -5)
[ -z "$left" ] || fail "swap files left behind on the full drive: $left"
echo "run_full_disk: OK (exit $rc, clear ENOSPC error, swap removed)"
