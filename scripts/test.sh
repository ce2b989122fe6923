#!/usr/bin/env bash
# One command from a fresh machine to the whole test suite: installs what is missing, builds
# everything (the CUDA backend too when nvcc is found; warnings are errors) and runs CTest; then
# builds the same suite with AddressSanitizer + UndefinedBehaviorSanitizer (CPU backend) and runs
# it again, so memory errors fail the run too. The multi-rank MPI tests run only in the first
# pass: Open MPI's own allocations are not ASan-clean; so do the CUDA kernels' host emulations
# (label emulation), which compile their own programs and use no build.
# Between the two, the Python package's pytest suite (scripts/test_python.sh) over the extension
# module the ci build made from the same objects (the ci preset is position-independent), so the
# library is compiled twice, not three times. Extra arguments go to both ctest runs (e.g.
# -R Offload); TIERZERO_SKIP_PYTHON=1 leaves the Python suite out (a C++-only run by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh ci
ctest --preset ci -j2 "$@"
if [ "${TIERZERO_SKIP_PYTHON:-0}" != 1 ]; then
  TIERZERO_BUILD=build/ci scripts/test_python.sh
fi
scripts/build.sh asan
ctest --preset asan -j2 -LE "mpi|emulation" "$@"
