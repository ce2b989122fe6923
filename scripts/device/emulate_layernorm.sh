#!/usr/bin/env bash
# Checks the CUDA layernorm and RMSNorm forward kernels on a machine without a GPU: extracts the
# kernel code of kernels/cuda/layernorm.cu (its anonymous namespace up to the parameter-gradient
# kernel, which emulate_gradient_sums.sh checks), compiles it as C++ under the host emulation of
# CUDA's threads and shuffles (emulate/cuda_host_emulation.hpp) and checks the fused residual +
# layernorm against the unfused pair (bit for bit) and a double reference
# (emulate/layernorm_check.cpp), and the same for llama.cu's fused residual + RMSNorm; and the 16-bit
# instances of all four against the fp32 ones on widened parameters, bit for bit; and the
# backward's input-gradient kernels of both norms: the 16-bit instances give the fp32 ones' bits
# on the widened gain, and the 16-bit copy they may write is that gradient rounded. A few
# seconds. Usage:
#   scripts/device/emulate_layernorm.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^namespace \{/{on=1; next} /^__global__ void layernorm_backward_params_kernel/{exit} on' \
  kernels/cuda/layernorm.cu >"$work/layernorm_body.inc"
# The RMSNorm kernels of llama.cu: its anonymous namespace up to the gain's gradient kernel.
awk '/^namespace \{/{on=1; next} /^\/\/ Pass 1 of dweight/{exit} on' \
  kernels/cuda/llama.cu >"$work/rmsnorm_body.inc"
g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -pthread -I scripts/device/emulate \
  -I kernels/cuda -I include -I "$work" scripts/device/emulate/layernorm_check.cpp -o "$work/check"
"$work/check"
