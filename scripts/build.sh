#!/usr/bin/env bash
# Configures and builds TierZero with the given CMake preset (default: ci = CUDA when nvcc is
# found, warnings as errors). Usage: scripts/build.sh [preset] [cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
shift || true
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "$@"
