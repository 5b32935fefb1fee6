#!/usr/bin/env bash
# Added launch latency of orion-run exec's interposer and scheduler, on the
# stand-in driver (tests/orion/fake_cuda), against calling it directly in
# the same run. Each case launches LAUNCHES zero-length kernels and reports
# the median and p99 wall time of one launch call.
#
#   scripts/bench/orion/orion_launch_latency.sh [BUILD_DIR] [LAUNCHES]
set -euo pipefail
build=${1:-build}
launches=${2:-20000}
app="$build/fake-cuda/fake_cuda_app"
orion="$build/bin/orion-run"
[ -x "$app" ] || { echo "no $app: build with the CUDA toolkit's headers present" >&2; exit 2; }
export ORION_QUIET=1

measure() {  # label, command...
  local label=$1
  shift
  local line
  line=$("$@" 2>/dev/null | grep '^launches') || { echo "$label: failed" >&2; exit 1; }
  set -- $line
  printf '%-44s median %6.2f us   p99 %7.2f us\n' "$label" "$(echo "$4 / 1000" | bc -l)" "$(echo "$6 / 1000" | bc -l)"
  echo "$4" >"$tmp/$label.median"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure direct "$app" --bench "$launches"
measure preloaded-no-scheduler env LD_PRELOAD="$build/bin/liborion_client.so" "$app" --bench "$launches"
measure hp-under-orion "$orion" exec --policy orion --hp "$app --bench $launches"
measure be-under-mps-released-at-once "$orion" exec --policy mps --be "$app --bench $launches"
base=$(cat "$tmp/direct.median")
for label in preloaded-no-scheduler hp-under-orion be-under-mps-released-at-once; do
  printf 'added median latency, %-30s %6.2f us\n' "$label:" "$(echo "($(cat "$tmp/$label.median") - $base) / 1000" | bc -l)"
done
