#!/usr/bin/env bash
# The Orion simulator's policy targets (docs/benchmarks.md) on 168 generated
# workloads that are not in examples/ (three HP inference models x seven BE
# clients x four rates x two arrival kinds), every policy on the same
# arrivals, three seeds each. About 25 minutes on one core; MODEL (e.g.
# resnet101 or bert) keeps only the pairings with that model.
#   scripts/bench/orion/orion_sweep.sh [BUILD_DIR] [REQUESTS] [SEEDS] [MODEL]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j "${FLEET_JOBS:-2}" --target orion-run >/dev/null
/usr/bin/python3 "$root/scripts/bench/orion/orion_sweep.py" "$build/bin/orion-run" "$root/examples/orion/profiles" \
  "${2:-1000}" "${3:-1,2,3}" ${4:+"$4"}
