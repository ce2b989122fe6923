#!/usr/bin/env bash
# The Python package's tests (integrations/python): installs it from the checkout with pip, which
# builds the library position-independent in build/python (kept, so a later run rebuilds only what
# changed; set CMAKE_*_COMPILER_LAUNCHER=ccache to share objects), and runs its pytest suite,
# the two-rank mpiexec test included. Extra arguments go to pytest (e.g. -k offload).
# TIERZERO_BUILD=build/ci (as scripts/test.sh sets it): install the module that build already
# made instead (its preset is position-independent), so the library is not compiled twice.
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
  # PyPI's wheel (it brings its CUDA libraries; the tests use its CPU path only).
  echo "test_python: installing PyTorch from PyPI for the OffloadAdamW tests" >&2
  pip_install torch
fi
if [ -n "${TIERZERO_BUILD:-}" ]; then
  # The module that build made (the ci preset builds it from the tests' own objects): pip installs
  # that file with the package's Python sources and compiles nothing.
  shopt -s nullglob
  modules=("$TIERZERO_BUILD"/python/_tierzero.*.so)
  shopt -u nullglob
  if [ ${#modules[@]} -ne 1 ]; then
    echo "test_python: expected one _tierzero module in $TIERZERO_BUILD/python, found ${#modules[@]}" \
      "(is the build position-independent, with python3-dev and pybind11-dev installed?)" >&2
    exit 1
  fi
  module="$(realpath "${modules[0]}")"
  echo "test_python: installing the package over $module" >&2
  pip_install ./integrations/python -C "cmake.define.TIERZERO_PYTHON_MODULE=$module" \
    -C "build-dir=$(realpath "$TIERZERO_BUILD")/python-package"
else
  pip_install ./integrations/python
fi
# From the tests' folder, so `import tierzero` finds the installed package, not the sources.
cd integrations/python/tests
python3 -m pytest -q -p no:cacheprovider "$@"
