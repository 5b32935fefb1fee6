#!/usr/bin/env bash
# Orion on a real GPU: a PyTorch inference client (HP) beside a training job
# (BE), alone and under orion-run exec with the orion and mps policies.
# Profiles are captured first with orion-profile capture. Prints HP p99 and
# BE throughput, each against its dedicated (alone) run in the same session.
#
# Then the simulator runs the same workload on the captured profiles and its
# ratios are printed beside the measured ones (orion_gpu_compare.py).
#
#   scripts/bench/orion/orion_gpu.sh [BUILD_DIR] [PYTHON]
#   HP_REQUESTS=300 BE_SECONDS=20 ORION_DEVICE=h200 (the GPU model for exec and the simulator) HP_ALONE_RUNS=3
#   BE_BATCH=512   rows of the BE's batch: 512 makes each of its matrix products
#                  (1.4 ms on an H200) outlast an HP request; 64 (0.2 ms) does not
#   RELEASE_AHEAD_US=150  the lead of the run labelled orion-ahead (orion with
#                  --release-ahead-us); 0 leaves that run out
#   KEEP=DIR   copy the profiles, reports, scheduler logs, workload and simulation there
set -uo pipefail
build=${1:-build}
python=${2:-python3}
pair="$(cd "$(dirname "$0")" && pwd)/orion_torch_pair.py"
bin="$build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
requests=${HP_REQUESTS:-300}
be_seconds=${BE_SECONDS:-20}
think_ms=2  # the HP client's time between requests (the simulator's host gap)
be_batch=${BE_BATCH:-512}
echo "BE batch $be_batch"

json_field() { "$python" -c "import json,sys
for line in open(sys.argv[1]):
    line=line.strip()
    if line.startswith('{\"role\": \"$2\"'): print(json.loads(line)['$3'])" "$1"; }

# The HP client's tail alone varies from run to run (0.9-1.5 ms p99 on an
# H200): it runs HP_ALONE_RUNS times (default 3), around the BE's run, and
# the median p50 and p99 are the dedicated figures.
alone_runs=${HP_ALONE_RUNS:-3}
hp_alone_run() { "$python" "$pair" --role hp --requests "$requests" --think-ms "$think_ms" >"$tmp/hp-alone-$1.txt" || exit 1; }
hp_alone_run 1
timeout -s TERM "$be_seconds" "$python" "$pair" --role be --be-batch "$be_batch" >"$tmp/be-alone.txt"
for ((k = 2; k <= alone_runs; k++)); do hp_alone_run "$k"; done
"$python" - "$tmp" "$alone_runs" >"$tmp/hp-alone.txt" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for k in range(1, int(sys.argv[2]) + 1) for line in open(f"{sys.argv[1]}/hp-alone-{k}.txt")
        if line.startswith('{"role": "hp"')]
print(json.dumps({"role": "hp", "requests": runs[0]["requests"], "runs": len(runs),
                  "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                  "p99_ms": statistics.median(r["p99_ms"] for r in runs),
                  "p99_ms_runs": [r["p99_ms"] for r in runs]}))
EOF
echo "HP alone, p99 of each run: $(json_field "$tmp/hp-alone.txt" hp p99_ms_runs)"
hp_alone=$(json_field "$tmp/hp-alone.txt" hp p99_ms)
be_alone=$(json_field "$tmp/be-alone.txt" be iterations_per_s)
echo "alone: HP p99 $hp_alone ms (median of $alone_runs runs), BE $be_alone it/s"
measured="\"alone\": {\"hp_p99_ms\": $hp_alone, \"be_it_s\": $be_alone}"

"$bin/orion-profile" capture -o "$tmp/hp.csv" --keep-records "$tmp/hp-records.jsonl" -- \
  "$python" "$pair" --role hp --requests 30 || exit 1
"$bin/orion-profile" capture -o "$tmp/be.csv" -- "$python" "$pair" --role be --be-batch "$be_batch" --iterations 10 || exit 1

mps=()
if command -v nvidia-cuda-mps-control >/dev/null; then mps=(--start-mps); else echo "no MPS control program: time slicing only"; fi
ahead_us=${RELEASE_AHEAD_US:-150}
runs=(orion mps)
[ "$ahead_us" = 0 ] || runs=(orion orion-ahead mps)
for run in "${runs[@]}"; do
  policy=${run%-ahead} extra=()
  [ "$run" = orion-ahead ] && extra=(--release-ahead-us "$ahead_us")
  "$bin/orion-run" exec --policy "$policy" "${extra[@]}" "${mps[@]}" --profiles "$tmp/hp.csv,$tmp/be.csv" --report \
    --device "${ORION_DEVICE:-h200}" --log "$tmp/$run.log" \
    --hp "$python $pair --role hp --requests $requests --think-ms $think_ms --ready-file $tmp/$run.ready" \
    --be "$python $pair --role be --be-batch $be_batch --ready-file $tmp/$run.ready" >"$tmp/$run.txt" ||
    { echo "$run: exec failed"; cat "$tmp/$run.txt"; continue; }
  hp=$(json_field "$tmp/$run.txt" hp p99_ms)
  be=$(json_field "$tmp/$run.txt" be iterations_per_s)
  grep -E '^(policy|orion|mps) ' "$tmp/$run.txt"
  "$python" -c "print(f'$run: HP p99 {float($hp):.2f} ms = {float($hp)/float($hp_alone):.2f}x alone; BE {float($be):.1f} it/s = {float($be)/float($be_alone):.2f}x alone')"
  measured+=", \"$run\": {\"hp_p99_ms\": $hp, \"be_it_s\": $be}"
done
echo "{$measured}" >"$tmp/measured.json"
status=0
"$python" "$(dirname "$pair")/orion_gpu_compare.py" "$bin/orion-run" "$tmp" "${ORION_DEVICE:-h200}" "$requests" "$think_ms" ||
  { echo "the simulator's comparison failed"; status=1; }
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$tmp"/*.csv "$tmp"/*.json "$tmp"/*.txt "$tmp"/*.log "$tmp"/*.jsonl "$KEEP"/ 2>/dev/null
fi
exit $status
