#!/usr/bin/env bash
# One command from a fresh machine to the main job: installs what is missing, builds, and trains
# the default small GPT on the built-in corpus with ZeRO stage 3, its parameters and optimizer
# states on NVMe (swap files under build/nvme_swap, through io_uring) and a 24 MiB device budget
# (examples/zero3_nvme_offload.json). It prints a progress line per step (loss, memory per tier,
# prefetch hits and stalls), the validation loss and a memory summary per tier and category.
# Extra arguments go to `tierzero train` (e.g. --steps 50, --profile p.json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh ci --target tierzero
mkdir -p build/nvme_swap
exec build/ci/src/cli/tierzero train --config examples/zero3_nvme_offload.json --device-mem 24MiB "$@"
