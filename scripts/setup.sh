#!/usr/bin/env bash
# Installs what TierZero needs to build and test, from Debian packages, skipping what is already
# there (chromium renders the HTML report in its test; libpng decodes the screenshot; ISA-L
# computes the swap and checkpoint CRC32C; PCRE2 runs the tokenizers' Unicode regexes in
# prepare-data and ICU their Unicode normalizers (NFC, ...); iproute2's `ip` makes the network
# namespaces of the two-node test), and the Python `safetensors` package from PyPI for the test
# that reads an exported model back as a Hugging Face user would (never a dependency of the
# library). The Python package
# (integrations/python) builds against pybind11 from Debian; scripts/test_python.sh installs its
# PyPI pieces (scikit-build-core, pytest, ml_dtypes, PyTorch's CPU build for OffloadAdamW's tests).
# The CUDA toolkit is not installed here: when /usr/local/cuda/bin/nvcc exists the
# CUDA backend is built too.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev liburing-dev nlohmann-json3-dev libcli11-dev libisal-dev libpcre2-dev libicu-dev
  libgtest-dev googletest libbenchmark-dev
  openmpi-bin libopenmpi-dev fio
  chromium libpng-dev iproute2
  python3-dev pybind11-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present" >&2
fi

if ! command -v python3 >/dev/null; then
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    python3 python3-pip >/dev/null
fi
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "setup: installing the Python packages safetensors and numpy (the export test)" >&2
  python3 -m pip install --quiet safetensors numpy 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages safetensors numpy
fi
