#!/usr/bin/env bash
# Builds the toolkit against PyTorch's libtorch 2.x (the CUDA build that GPU
# clusters use) instead of Debian's CPU libtorch 1.13, into its own folder.
#
#   scripts/build-torch2.sh                      libtorch of the python3 on PATH (import torch)
#   FLEET_TORCH_PREFIX=DIR scripts/build-torch2.sh   a libtorch CMake prefix (…/torch/share/cmake)
#   FLEET_TORCH_WHEEL=torch-2.x-….whl scripts/build-torch2.sh
#       unpack a downloaded wheel (pip download torch --no-deps) into the build
#       folder and use its libtorch; FLEET_TORCH_DEPS=DIR adds the shared
#       libraries of the nvidia-* wheels in DIR that the CUDA toolkit here lacks
#       (for linking only: `scripts/build-torch2.sh` never installs anything)
#   FLEET_BUILD_DIR=dir (default build-torch2), FLEET_JOBS=N (default 2),
#   FLEET_TEST=1 also runs the tests there (GPU tests run when a GPU is visible),
#   FLEET_TARGETS="a b" builds these targets only.
#
# Not part of CI; docs/gpu.md explains the GPU build on a cluster.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FLEET_BUILD_DIR:-build-torch2}
jobs=${FLEET_JOBS:-2}
mkdir -p "$build"
build=$(cd "$build" && pwd)

prefix=${FLEET_TORCH_PREFIX:-}
link_dirs=()
if [ -n "${FLEET_TORCH_WHEEL:-}" ]; then
  unpacked="$build/torch-wheel"
  if [ ! -f "$unpacked/.unpacked" ] || [ "$(cat "$unpacked/.unpacked")" != "$(basename "$FLEET_TORCH_WHEEL")" ]; then
    echo "== unpacking libtorch from $(basename "$FLEET_TORCH_WHEEL") (headers, libraries, CMake files)"
    rm -rf "$unpacked" && mkdir -p "$unpacked"
    unzip -q -o "$FLEET_TORCH_WHEEL" 'torch/include/*' 'torch/lib/*' 'torch/share/*' -d "$unpacked"
    basename "$FLEET_TORCH_WHEEL" > "$unpacked/.unpacked"
  fi
  prefix="$unpacked/torch/share/cmake"
  if [ -n "${FLEET_TORCH_DEPS:-}" ]; then
    # Beside torch/, as pip lays them out: libtorch_cuda's RPATH
    # ($ORIGIN/../../nvidia/*/lib) then finds them at run time too.
    for wheel in "$FLEET_TORCH_DEPS"/*.whl; do
      [ -f "$unpacked/.$(basename "$wheel")" ] && continue
      echo "== unpacking the libraries of $(basename "$wheel")"
      unzip -Z1 "$wheel" 2>/dev/null | grep -c '^nvidia/.*\.so' >/dev/null || {
        echo "build-torch2: $(basename "$wheel") holds no nvidia/ libraries (a 0.0.0a0 placeholder? fetch it with" \
             "--platform manylinux2014_x86_64, docs/gpu.md)" >&2
        exit 2
      }
      unzip -q -o "$wheel" 'nvidia/*' -d "$unpacked" && touch "$unpacked/.$(basename "$wheel")"
    done
    if [ -d "$unpacked/nvidia" ]; then
      while IFS= read -r dir; do link_dirs+=("$dir"); done < <(find "$unpacked/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u)
    fi
  fi
fi
if [ -z "$prefix" ]; then
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    { echo "build-torch2: no libtorch: give FLEET_TORCH_PREFIX, FLEET_TORCH_WHEEL, or a python3 with torch" >&2; exit 2; }
fi
echo "== libtorch: $prefix"

# The libraries libtorch_cuda needs at link time that are not on the default
# search path (the wheels' nvidia/* folders, CUDA's lib64) are handed to the
# linker with -rpath-link, and to the programs as RPATH.
ldflags=""
cuda_lib=/usr/local/cuda/lib64
[ -d "$cuda_lib" ] && link_dirs+=("$cuda_lib")
for d in "${link_dirs[@]}"; do ldflags+=" -Wl,-rpath-link,$d -Wl,-rpath,$d"; done

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The torch root joins the prefix path: TorchConfig looks for its libraries
# with the system folders first, where a distribution's libtorch may sit.
# TORCH_CUDA_ARCH_LIST replaces CMAKE_CUDA_ARCHITECTURES once libtorch is in
# (A100, H100/H200, and PTX for newer GPUs, as the CPU build's default).
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_PREFIX_PATH=$prefix;$prefix/../.." "-DTORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0+PTX}" \
  -DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCMAKE_SHARED_LINKER_FLAGS="$ldflags" ${FLEET_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs" ${FLEET_TARGETS:+--target $FLEET_TARGETS}
"$build/bin/sailor-run" --version
if [ "${FLEET_TEST:-0}" = 1 ]; then
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)
fi
