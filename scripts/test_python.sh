#!/usr/bin/env bash
# The Python package's tests (integrations/python): installs it from the checkout with pip, which
# builds the library position-independent in build/python (kept, so a later run rebuilds only what
# changed; set CMAKE_*_COMPILER_LAUNCHER=ccache to share objects), and runs its pytest suite,
# the two-rank mpiexec test included. Extra arguments go to pytest (e.g. -k offload).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache, when the machine has it and the caller chose no launcher: the library's ~140 PIC objects
# are then compiled once per change, not once per fresh build directory.
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
pip_install() {
  python3 -m pip install --quiet --no-build-isolation "$@" ||
    python3 -m pip install --quiet --no-build-isolation --break-system-packages "$@"
}
if ! python3 -c "import scikit_build_core, pytest, ml_dtypes" 2>/dev/null; then
  echo "test_python: installing scikit-build-core, pytest and ml_dtypes from PyPI" >&2
  pip_install scikit-build-core pytest ml_dtypes
fi
if ! python3 -c "import torch" 2>/dev/null; then
  echo "test_python: installing PyPI's PyTorch (CPU) for the OffloadAdamW tests" >&2
  pip_install torch --index-url https://download.pytorch.org/whl/cpu || pip_install torch
fi
pip_install ./integrations/python
# From the tests' folder, so `import tierzero` finds the installed package, not the sources.
cd integrations/python/tests
python3 -m pytest -q -p no:cacheprovider "$@"
