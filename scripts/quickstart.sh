#!/usr/bin/env bash
# One command from a fresh machine to a training run: installs what is missing, builds, and runs
# `tierzero train` on its built-in defaults (a small GPT on the built-in corpus), which prints a
# progress line per step and a memory summary. Extra arguments go to `tierzero train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh ci --target tierzero
exec build/ci/src/cli/tierzero train "$@"
