#!/usr/bin/env bash
# Checks the CUDA backend's AdamW on a machine without a GPU: extracts elementwise.cu's AdamW
# kernels (the per-element update, the plain kernel and the per-segment one) and their launchers
# (the copy type as a template argument, adamw_update_segments' table of up to 64 segments per
# launch), turns each `<<<grid, block, 0, stream>>>` launch into a call of the host emulation of
# CUDA's threads (emulate/cuda_host_emulation.hpp), and checks them (emulate/adamw_check.cpp)
# against a double reference, the segments against the per-segment launches bit for bit, the
# copy against the conversion, gaps between segments untouched, and the same bits with the blocks
# in a shuffled order. A few seconds. Usage:
#   scripts/device/emulate_adamw.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=kernels/cuda/elementwise.cu
grep -q '^struct AdamWScalars {' "$src" || { echo "emulate_adamw: AdamWScalars not found" >&2; exit 1; }
grep -q '^void launch_adamw_segments(' "$src" || { echo "emulate_adamw: launcher not found" >&2; exit 1; }
{
  # The kernels: from the scalars' struct to the next section.
  awk '/^struct AdamWScalars \{/ {on = 1} /^\/\/ ---- reductions/ {exit} on {print}' "$src"
  # The launchers: from the anonymous namespace before check_adamw_step to launch_add_bias.
  awk '/^namespace \{/ {buf = ""; keep = 1} keep {buf = buf $0 "\n"}
       /^void check_adamw_step/ {on = 1; printf "%s", buf; buf = ""; keep = 0; next}
       on && /^void launch_add_bias/ {exit} on {print}' "$src"
} | perl -0pe 's/(\w+(?:<\w+>)?)\s*<<<([^<>]*?),\s*kBlockSize,\s*0,\s*stream>>>\(([^;]*?)\);/emulate_launch($2, [&] { $1($3); });/gs' \
  >"$work/adamw_body.inc"
grep -q '<<<' "$work/adamw_body.inc" && { echo "emulate_adamw: a launch left untranslated" >&2; exit 1; }
grep -c 'emulate_launch' "$work/adamw_body.inc" | grep -qx 2 ||
  { echo "emulate_adamw: expected the two launches of the AdamW kernels" >&2; exit 1; }
g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -ffp-contract=off -pthread \
  -I scripts/device/emulate -I include -I "$work" scripts/device/emulate/adamw_check.cpp \
  -o "$work/check"
"$work/check"
