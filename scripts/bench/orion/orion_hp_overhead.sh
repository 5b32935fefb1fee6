#!/usr/bin/env bash
# What the interposer and the scheduler add to a real, launch-bound
# high-priority client on a GPU, with nothing beside it: the PyTorch
# inference client of orion_gpu.sh (36 kernels per request, launched from
# Python) run directly, with the interposer preloaded but no scheduler
# (pass-through), and under `orion-run exec --policy orion` alone (every
# launch published to the scheduler, its completion tracked with events).
# The cases alternate, twice each, so drift of the machine shows as spread.
#
#   scripts/bench/orion/orion_hp_overhead.sh [BUILD_DIR] [PYTHON]
#   HP_REQUESTS=2000
#   VARIANT_LIBRARIES="NAME=FILE ..."  also run the exec case with each of
#                          these interposers (ORION_CLIENT_LIBRARY), e.g. an
#                          older build or one with a part switched off
set -uo pipefail
build=${1:-build}
python=${2:-python3}
pair="$(cd "$(dirname "$0")" && pwd)/orion_torch_pair.py"
bin="$build/bin"
library="$bin/liborion_client.so"
[ -f "$library" ] || { echo "no $library: build with the CUDA toolkit" >&2; exit 2; }
requests=${HP_REQUESTS:-2000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hp="$python $pair --role hp --requests $requests --think-ms 2"

run_case() {  # label, then the command line
  local label=$1
  shift
  "$@" >"$tmp/out.txt" 2>"$tmp/err.txt" || { echo "$label: failed"; tail -n 3 "$tmp/err.txt"; return; }
  "$python" - "$tmp/out.txt" "$label" >>"$tmp/results.txt" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{"role": "hp"'):
        r = json.loads(line)
        print(f"{sys.argv[2]} {r['p50_ms']} {r['p99_ms']}")
EOF
}

variants=(${VARIANT_LIBRARIES:-})
for round in 1 2; do
  run_case direct $hp
  run_case pass-through env LD_PRELOAD="$library" $hp
  run_case exec "$bin/orion-run" exec --policy orion --hp "$hp"
  for v in "${variants[@]}"; do
    run_case "exec-${v%%=*}" env ORION_CLIENT_LIBRARY="${v#*=}" "$bin/orion-run" exec --policy orion --hp "$hp"
  done
done
"$python" - "$tmp/results.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, p50, p99 = line.split()
    rows.setdefault(label, []).append((float(p50), float(p99)))
base = statistics.mean(p50 for p50, _ in rows.get("direct", [(float("nan"), 0)]))
print(f"{'case':14s} {'HP p50 ms (runs)':>24s} {'p99 ms (runs)':>24s} {'p50 vs direct':>14s}")
for label, runs in rows.items():
    p50s = " / ".join(f"{p:.3f}" for p, _ in runs)
    p99s = " / ".join(f"{p:.3f}" for _, p in runs)
    mean = statistics.mean(p for p, _ in runs)
    print(f"{label:14s} {p50s:>24s} {p99s:>24s} {mean - base:+11.3f} ms")
EOF
