#!/usr/bin/env bash
# Checks the CUDA fused attention's kernels on a machine without a GPU: extracts the kernel code
# of kernels/cuda/flash_attention.cu (its anonymous namespace up to the launch helpers), compiles
# it as C++ under a host emulation of CUDA's threads, barriers and shuffles
# (emulate/cuda_host_emulation.hpp) and compares against a double reference
# (emulate/flash_attention_check.cpp), then runs each case again with every kernel's blocks in a
# shuffled order and checks the results repeat bit for bit. About 30 s on 2 cores. Usage:
#   scripts/device/emulate_flash_attention.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^namespace \{/{on=1; next} /^constexpr size_t forward_smem_bytes/{exit} on' \
  kernels/cuda/flash_attention.cu |
  sed 's/extern __shared__ float smem\[\];/float* smem = ctx->smem;/' >"$work/kernels_body.inc"
g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -pthread -I scripts/device/emulate \
  -I "$work" scripts/device/emulate/flash_attention_check.cpp -o "$work/check"
"$work/check"
