#!/usr/bin/env bash
# Orion benchmarks: (1) simulator speed against a replay baseline, (2) the
# policy table on the reference ResNet50 inference (HP) + training (BE)
# workload, every policy on the same arrivals.
#   scripts/bench/orion/orion.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j "${FLEET_JOBS:-2}" --target bench_orion_simulator orion-run >/dev/null

echo "== simulator speed (one core)"
json=$(mktemp)
taskset -c 0 "$build/bin/bench_orion_simulator" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=json >"$json" 2>/dev/null
/usr/bin/python3 - "$json" <<'PY'
import json, sys
rows = {b["name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b["name"].endswith("_median")}
base = rows["BM_ReplayBaseline_median"]["items_per_second"]
for name, b in rows.items():
    ips = b["items_per_second"]
    print(f"{name.replace('_median', ''):28s} {ips / 1e6:8.2f} M kernels/s   {ips / base:6.3f} x replay baseline")
PY
rm -f "$json"

echo
echo "== policies on examples/orion/rnet50_inf_train.json (V100, ResNet50 b4 inference at Poisson 15 rps + ResNet50 b32 training)"
"$build/bin/orion-run" -q simulate -w "$root/examples/orion/rnet50_inf_train.json" -p all
