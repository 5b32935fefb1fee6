#!/usr/bin/env bash
# Builds the toolkit (installing what it needs) and runs the main job of each
# program on the built-in examples. Programs whose subcommands have not landed
# yet show their version, build configuration and shared flags instead.
#
#   scripts/demo.sh            FLEET_BUILD_DIR=dir to use another build folder
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FLEET_BUILD_DIR:-build}

scripts/install-deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "${FLEET_JOBS:-2}" >/dev/null
bin="$root/$build/bin"

for tool in sailor-plan sailor-run dz-compress dz-serve orion-profile orion-run; do
  echo
  echo "=== $tool"
  "$bin/$tool" --version
  # The first line of --help says what the program is for.
  "$bin/$tool" --help | head -n 1
  subcommands=$("$bin/$tool" --help | sed -n '/^Subcommands:/,$p' | tail -n +2)
  if [ -n "$subcommands" ]; then
    echo "subcommands:"
    echo "$subcommands"
  else
    echo "subcommands: none in this build yet"
  fi
done
echo
echo "demo: done (binaries are in $build/bin)"
