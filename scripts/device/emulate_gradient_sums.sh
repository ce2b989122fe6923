#!/usr/bin/env bash
# Checks the CUDA backend's deterministic gradient sums on a machine without a GPU: extracts the
# kernels (the token embedding's gradient and the bias column sums of kernels/cuda/elementwise.cu,
# these of fp32 and of 16-bit gradients,
# layernorm.cu's parameter kernel, llama.cu's RMSNorm gain kernel, and the column-sum slicing of
# cuda_common.cuh), compiles them as C++ under the host emulation of CUDA's threads
# (emulate/cuda_host_emulation.hpp), and checks them against a double reference and, with every
# kernel's blocks in a shuffled order, for the same bits (emulate/gradient_sums_check.cpp).
# A few seconds. Usage:
#   scripts/device/emulate_gradient_sums.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A function of a .cu file: from its signature line (with the template line above it, if any) to
# its closing brace in column 0.
extract() {
  awk -v name="$2" '/^(__global__|__device__|inline)/ && index($0, " " name "(") {
      on = 1; if (prev ~ /^template </) print prev}
    on {print} on && /^}/ {exit} {prev = $0}' "$1"
  grep -q " $2(" "$1" || { echo "emulate_gradient_sums: $2 not found in $1" >&2; exit 1; }
}
{
  grep -E '^constexpr size_t kMaxGridY' kernels/cuda/cuda_common.cuh
  # The column-sum constants, ColumnSlices and column_slices().
  awk '/^constexpr int kColumnTile/ {on = 1} on {print}
    /^inline ColumnSlices column_slices/ {f = 1} f && /^}/ {exit}' kernels/cuda/cuda_common.cuh
  for f in local_row encoder_sort_keys_kernel encoder_backward_runs_kernel bias_backward_kernel \
           column_partials_sum_kernel; do
    extract kernels/cuda/elementwise.cu $f
  done
  extract kernels/cuda/layernorm.cu layernorm_backward_params_kernel
  extract kernels/cuda/llama.cu rmsnorm_backward_weight_kernel
} >"$work/gradient_sums_body.inc"
g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -pthread -I scripts/device/emulate \
  -I kernels/cuda -I include -I "$work" scripts/device/emulate/gradient_sums_check.cpp \
  -o "$work/check"
"$work/check"
