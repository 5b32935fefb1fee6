#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a machine without a GPU (a login
# node, a laptop, CI), against a downloaded PyTorch wheel, and gathers the
# stripped programs and the CTest files into a small tree that travels to the
# GPU machine, where the check then runs without compiling anything:
#
#   FLEET_TORCH_WHEEL=torch-2.11.0-….whl FLEET_TORCH_DEPS=DIR scripts/gpu-prebuild.sh [TREE]
#   (on the GPU machine)  FLEET_PREBUILT=TREE scripts/gpu-check.sh
#
# TREE defaults to build-gpu-prebuilt (ignored by git). The wheel must be the
# build of torch that the GPU machine's python3 imports (same version and CUDA
# version: `python3 -c 'import torch; print(torch.__version__)'` there).
# TORCH_CUDA_ARCH_LIST defaults to 9.0 (H100/H200); FLEET_BUILD_DIR (default
# build-torch2) and FLEET_JOBS as for scripts/build-torch2.sh, which does the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tree=${1:-build-gpu-prebuilt}
build=${FLEET_BUILD_DIR:-build-torch2}
[ -n "${FLEET_TORCH_WHEEL:-}" ] || [ -n "${FLEET_TORCH_PREFIX:-}" ] ||
  { echo "gpu-prebuild: give FLEET_TORCH_WHEEL (the GPU machine's torch build) or FLEET_TORCH_PREFIX" >&2; exit 2; }
targets=$(bash scripts/gpu-check.sh targets)
FLEET_TARGETS=$targets TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
  FLEET_BUILD_DIR="$build" \
  FLEET_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DWITH_CUDA=ON -DFLEET_PYTHON=python3 ${FLEET_CMAKE_ARGS:-}" \
  scripts/build-torch2.sh
build=$(cd "$build" && pwd)

rm -rf "$tree" && mkdir -p "$tree"
tree=$(cd "$tree" && pwd)
# Programs and test binaries, stripped; every CTest file, so `ctest -L gpu` works there.
(cd "$build" && find . -name torch-wheel -prune -o -type f \( -name 'CTestTestfile.cmake' -o -name '*_include.cmake' \
   -o -name '*_tests.cmake' -o -name '*_labels.cmake' \) -print) | while read -r f; do
  mkdir -p "$tree/$(dirname "$f")" && cp "$build/$f" "$tree/$f"
done
for target in $targets; do
  for f in $(cd "$build" && find bin tests -name torch-wheel -prune -o -type f \( -name "$target" -o -name "lib$target.so" \) -print); do
    mkdir -p "$tree/$(dirname "$f")"
    strip --strip-unneeded -o "$tree/$f" "$build/$f"
  done
done
printf 'source=%s\nbuild=%s\n' "$root" "$build" > "$tree/prebuilt.env"
echo "gpu-prebuild: $(find "$tree" -type f | wc -l) files, $(du -sm "$tree" | cut -f1) MiB in $tree"
