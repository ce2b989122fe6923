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
pip_install ./integrations/python
# From the tests' folder, so `import tierzero` finds the installed package, not the sources.
cd integrations/python/tests
python3 -m pytest -q -p no:cacheprovider "$@"
