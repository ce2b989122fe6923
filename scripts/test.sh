#!/usr/bin/env bash
# One command from a fresh machine to the whole test suite: installs what is missing, builds
# everything (the CUDA backend too when nvcc is found; warnings are errors) and runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh ci
ctest --preset ci -j2 "$@"
