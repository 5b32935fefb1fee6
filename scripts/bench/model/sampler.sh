#!/usr/bin/env bash
# Time per sampled token of the token sampler (lib/model/sampler.cpp) over
# Llama-2 (32000) and Llama-3 (128256) vocabularies, against greedy argmax in
# the same run, on one pinned core.
#   scripts/bench/model/sampler.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j "${FLEET_JOBS:-2}" --target bench_sampler >/dev/null
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
for vocab in 32000 128256; do
  "${pin[@]}" "$build/bin/bench_sampler" "$vocab" 200
done
