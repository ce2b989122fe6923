#!/usr/bin/env bash
# Prepares, on the development machine, DeepSpeed for issue 27's offload comparison
# (scripts/device/gpu_check.sh offload, scripts/device/peer_offload_torch.py) on a GPU machine
# that has PyTorch but no network: a wheel of DeepSpeed built here from its PyPI source (pure
# Python: its CPU Adam is compiled there at first use, against that machine's PyTorch) and
# wheels of the dependencies PyTorch does not bring, for CPython 3.10-3.13, into
# .devpeers/wheels (git-ignored, never committed). gpu_check.sh installs them into a directory
# of their own on PYTHONPATH, not into the machine's site-packages. Carry .devpeers.
#   scripts/device/peers_prepare_offload.sh [deepspeed version]
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-0.19.8}
out=.devpeers/wheels
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devpeers/' "$exclude" 2>/dev/null || echo '/.devpeers/' >>"$exclude"
mkdir -p "$out"
pip wheel --quiet --no-deps -w "$out" "deepspeed==$version"
# numpy, which DeepSpeed imports too, is not carried (16 MB per Python version): where the GPU
# machine lacks it, the DeepSpeed peer says so and the comparison goes on without it.
deps="hjson msgpack ninja psutil py-cpuinfo pydantic pydantic-core annotated-types
      typing-inspection typing-extensions einops packaging tqdm"
for py in 3.10 3.11 3.12 3.13; do
  # shellcheck disable=SC2086
  pip download --quiet --only-binary=:all: --no-deps --python-version "$py" \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$out" $deps
done
ls "$out"
