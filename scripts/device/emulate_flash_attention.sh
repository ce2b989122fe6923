#!/usr/bin/env bash
# Checks the CUDA fused attention's kernels on a machine without a GPU: extracts the kernel code
# of kernels/cuda/flash_attention.cu (its anonymous namespace up to the launch helpers), compiles
# it as C++ under a host emulation of CUDA's threads, barriers and shuffles
# (emulate/cuda_host_emulation.hpp) and compares against a double reference
# (emulate/flash_attention_check.cpp), then runs each case again with every kernel's blocks in a
# shuffled order and checks the results repeat bit for bit. Then the same for the tensor-core
# kernels of flash_attention_tc.cu, with WMMA and bf16 emulated too (emulate/wmma_host_emulation.hpp)
# and the tolerance their bf16 operands deserve. Both with their 16-bit instances too, against the
# fp32 ones on widened tensors, bit for bit. A few minutes on 2 cores. Usage:
#   scripts/device/emulate_flash_attention.sh [fp32|tc|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
which=${1:-all}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build() {  # build DIR SOURCE_FILE END_PATTERN SHARED_DECL [extra flags]
  local dir=$1 src=$2 end=$3 decl=$4
  shift 4
  mkdir -p "$dir"
  awk -v end="$end" '/^namespace \{/{on=1; next} $0 ~ end {exit} on' "$src" |
    sed "s/$decl/unsigned char* tc_smem = reinterpret_cast<unsigned char*>(ctx->smem);/; s/extern __shared__ float smem\[\];/float* smem = ctx->smem;/" \
      >"$dir/kernels_body.inc"
  g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -pthread -I scripts/device/emulate \
    -I kernels/cuda -I kernels -I include -I "$dir" "$@" scripts/device/emulate/flash_attention_check.cpp \
    -o "$dir/check"
}
tc_decl='extern __shared__ __align__(128) unsigned char tc_smem\[\];'
if [ "$which" = fp32 ] || [ "$which" = all ]; then
  echo "== fp32 kernels (flash_attention.cu)"
  build "$work/fp32" kernels/cuda/flash_attention.cu '^constexpr size_t forward_smem_bytes' "$tc_decl"
  "$work/fp32/check"
fi
if [ "$which" = tc ] || [ "$which" = all ]; then
  echo "== tensor-core kernels (flash_attention_tc.cu)"
  build "$work/tc" kernels/cuda/flash_attention_tc.cu '^// ---- launches' "$tc_decl" -DTZ_EMULATE_TC
  "$work/tc/check"
fi
