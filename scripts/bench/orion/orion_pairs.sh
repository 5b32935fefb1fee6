#!/usr/bin/env bash
# The simulator against a real GPU on kernel pairs (the measurement Orion's
# contention constants come from, repeated on this machine's GPU): each
# kernel is captured with orion-profile capture (launch data, so the
# simulator places its blocks by occupancy), timed alone, one after the
# other and together in two streams (scripts/bench/orion/orion_kernel_pairs.py),
# and the same pair is simulated (two streams, no priority). Prints measured
# and simulated times side by side.
#
#   scripts/bench/orion/orion_pairs.sh [BUILD_DIR] [PYTHON]
#   KEEP=DIR   copy the measurements and the captured profiles there (for
#              orion_contention_fit.py)
#   ORION_DEVICE=NAME   the simulator's device (default h200)
set -uo pipefail
build=${1:-build}
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" "$here/orion_kernel_pairs.py" --measure >"$tmp/measured.jsonl" || exit 1
for kind in conv bn; do
  "$bin/orion-profile" -q capture --skip 2 -o "$tmp/$kind.csv" -- "$python" "$here/orion_kernel_pairs.py" --capture "$kind" ||
    exit 1
done
"$python" "$here/orion_pairs_compare.py" "$bin/orion-run" "$tmp" "${ORION_DEVICE:-h200}" || exit 1
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$tmp"/* "$KEEP"/; fi
