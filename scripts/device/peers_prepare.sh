#!/usr/bin/env bash
# Prepares, on the development machine, the peers that issue 26's GPU comparison runs beside
# `tierzero bench train --device cuda` (scripts/device/gpu_check.sh peers): llm.c's train_gpt2cu,
# built here from its public source for sm_90 (bf16, cuDNN flash attention through
# cudnn-frontend's headers, no MPI/NCCL), into .devpeers/ (git-ignored, never committed), so that
# device time is spent measuring, not compiling. The sources are the caller's checkouts (the
# session's `fetch` of karpathy/llm.c and NVIDIA/cudnn-frontend); neither enters this repository.
#   scripts/device/peers_prepare.sh LLMC_SRC_DIR CUDNN_FRONTEND_DIR [sm]
# Then carry .devpeers (and .devbundle) with the device call.
set -euo pipefail
cd "$(dirname "$0")/../.."
llmc=$(realpath "$1")
frontend=$(realpath "$2")
sm=${3:-90}
out=$PWD/.devpeers
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devpeers/' "$exclude" 2>/dev/null || echo '/.devpeers/' >>"$exclude"
mkdir -p "$out"
[ -f "$llmc/train_gpt2.cu" ] || { echo "peers_prepare: no train_gpt2.cu in $llmc" >&2; exit 1; }
[ -d "$frontend/include" ] || { echo "peers_prepare: no include/ in $frontend" >&2; exit 1; }
# CUDA 13 takes a cudaMemLocation where llm.c (written for CUDA 12) passes cudaCpuDeviceId, in
# its out-of-memory fallback only; the build fails on that one call without this edit of the
# peer's checkout (never of ours).
sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
  "$llmc/llmc/cuda_utils.cuh"
# llm.c's Makefile looks for ./cudnn-frontend/include.
ln -sfn "$frontend" "$llmc/cudnn-frontend"
# NVML (libnvidia-ml) comes with the driver, which a machine without a GPU lacks: link against an
# empty stand-in with the driver library's soname, so the GPU machine's own is loaded at run time.
# The link line is llm.c's own plus NVRTC, which cudnn-frontend needs.
ldflags="-lcublas -lcublasLt -lcudnn -lnvrtc -lnvidia-ml"
if ! ldconfig -p | grep -q libnvidia-ml.so; then
  stub=$(mktemp -d)
  echo "" | cc -shared -fPIC -x c - -o "$stub/libnvidia-ml.so" -Wl,-soname,libnvidia-ml.so.1
  ldflags="$ldflags -L$stub"
fi
make -C "$llmc" train_gpt2cu USE_CUDNN=1 NO_MULTI_GPU=1 NO_USE_MPI=1 PRECISION=BF16 \
  GPU_COMPUTE_CAPABILITY="$sm" NVCC_LDFLAGS="$ldflags"
cp "$llmc/train_gpt2cu" "$out/train_gpt2cu"
git -C "$llmc" rev-parse HEAD >"$out/llmc_commit" 2>/dev/null || echo unknown >"$out/llmc_commit"
ldd "$out/train_gpt2cu" | awk '{print $1}' | grep -E "cudnn|cublas|cudart|nvrtc" >"$out/needs" || true
echo "peers_prepare: $out/train_gpt2cu (sm_$sm) needs: $(tr '\n' ' ' <"$out/needs")" >&2
