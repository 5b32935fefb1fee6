#!/usr/bin/env bash
# Installs every Debian and Python package the toolkit needs, idempotently and
# without questions. Quick when everything is present (a few dpkg queries and
# one Python import). Debian 12 (bookworm); run as root or with sudo.
#
#   scripts/install-deps.sh            Debian packages + Python environment (.venv)
#   FLEET_SKIP_APT=1 scripts/...       only the Python environment
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# libopenblas0-pthread: Debian's libtorch calls whatever libblas.so.3 the
# alternatives system points at; without OpenBLAS that is the reference BLAS,
# which makes training and inference about a hundred times slower.
debian_packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libzstd-dev zstd libhdf5-dev
  libtorch-dev libopenblas0-pthread libgloo-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev libonig-dev
  python3 python3-venv python3-numpy python3-torch python3-matplotlib
)
# Versions known to work with Debian's torch 1.13 and numpy 1.24; PyPI's torch
# wheels are never installed (they pull gigabytes of CUDA libraries).
# openai, httpx and prometheus_client are the real client and parser the
# dz-serve tests talk to the server with; jinja2 renders chat templates for
# transformers, the reference for ours.
python_packages=(h5py==3.16.0 hdf5plugin==7.1.0 safetensors==0.8.0 tokenizers==0.19.1 transformers==4.44.2
                 openai==1.59.9 httpx==0.28.1 prometheus_client==0.21.1 jinja2==3.1.4 lizard==1.24.3)

log() { echo "install-deps: $*" >&2; }

if [ "${FLEET_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "Debian packages: all present"
  fi
fi

# Python: Debian's interpreter (which has numpy, torch, matplotlib) plus a
# virtual environment that sees them and adds what Debian lacks or ships
# without the zstd filter (hdf5plugin).
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" - "${python_packages[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, wanted = spec.split("==")
    if version(name) != wanted:
        sys.exit(1)
import h5py, hdf5plugin, safetensors, tokenizers, transformers, numpy, torch, openai, prometheus_client, jinja2, lizard  # noqa: F401
PY
then
  log "installing Python packages: ${python_packages[*]}"
  "$venv/bin/pip" install -q --disable-pip-version-check "${python_packages[@]}"
else
  log "Python packages: all present"
fi
