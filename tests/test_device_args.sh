# Sourced by the end-to-end test scripts with $ranks set: sets device_args from
# TIERZERO_TEST_DEVICE (e.g. cuda), and skips the test (prints "no CUDA device", exits 0, which
# CTest reports as skipped) when there are fewer GPUs than ranks: NCCL refuses two ranks of a
# communicator on one GPU, so such a run would fail for want of hardware, not for a defect.
device_args=""
[ -n "${TIERZERO_TEST_DEVICE:-}" ] && device_args="--device $TIERZERO_TEST_DEVICE"
if [ -n "${TIERZERO_TEST_DEVICE:-}" ] && [ "$ranks" -gt 1 ] && command -v nvidia-smi > /dev/null; then
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c "^GPU")
  if [ "$gpus" -lt "$ranks" ]; then
    echo "no CUDA device for each of the $ranks ranks: nvidia-smi lists $gpus GPU(s)"
    exit 0
  fi
fi
