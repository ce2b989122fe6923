#!/usr/bin/env bash
# Configures and builds TierZero with the given CMake preset (default: ci = CUDA when nvcc is
# found, warnings as errors). Usage: scripts/build.sh [preset] [cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache, when the machine has it and the caller chose no launcher: paths relative to the checkout
# (CCACHE_BASEDIR) and no working directory in the hash, so another clone of the same sources in
# another folder reuses the objects. Nothing needs it; it only saves time.
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
fi
preset="${1:-ci}"
shift || true
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "$@"
