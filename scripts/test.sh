#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs every CPU test with
# CTest, then the tests of everything that builds without libtorch (common,
# orion, the programs, interop, tokenizers) again under AddressSanitizer + UBSan.
# Exits non-zero on any failure.
#
#   scripts/test.sh                 everything
#   FLEET_BUILD_DIR=dir             build folder (default build)
#   FLEET_SKIP_SANITIZERS=1         skip the ASan/UBSan pass
#   FLEET_JOBS=N                    parallel build jobs (default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FLEET_BUILD_DIR:-build}
jobs=${FLEET_JOBS:-2}

scripts/install-deps.sh

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== configure ($build)"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake -S . -B "$build" >/dev/null
echo "== build"
cmake --build "$build" -j "$jobs"
echo "== test"
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)

if [ "${FLEET_SKIP_SANITIZERS:-0}" != 1 ]; then
  san="$build-asan"
  echo "== AddressSanitizer + UBSan: tests without libtorch ($san)"
  [ -f "$san/CMakeCache.txt" ] || cmake -S . -B "$san" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
      -DSANITIZE=address,undefined -DWITH_TORCH=OFF -DWITH_CUDA=OFF
  cmake --build "$san" -j "$jobs"
  (cd "$san" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j "$jobs" -L 'common|orion|apps|interop|tokenizer|deltazip')
fi
echo "== all tests passed"
