#!/usr/bin/env bash
# Recovery of an elastic job after kill -9 of one of 4 workers (tiny model,
# loopback, one CPU thread each), recovery "restart": the time from the
# failure to the first finished step of the new generation, and the steps
# redone, over RUNS runs. Compare with the step time of the same job.
#
#   scripts/bench/sailor_elastic.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
runs=${2:-5}
run="$build/bin/sailor-run"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
"$run" -q init --preset tiny -o init
"$run" -q make-corpus --task base --lines 400 -o base.txt
mkdir inputs
"$run" -q profile --model init --gpu-type cpu --mbs 1,2 --seq-len 32 --repeats 3 --threads 1 -o inputs/profile.json
"$run" -q launch --nprocs 2 -- profile-net --gpu-type cpu --max-bytes 1048576 -o inputs/cluster.json
python3 - <<'PY'
import json
c = json.load(open("inputs/cluster.json")); c["gpu_types"]["cpu"]["gpus_per_node"] = 8
json.dump(c, open("inputs/cluster.json", "w"))
json.dump({"format": "gpufleet-sailor-job", "version": 1, "model": "init", "global_batch": 8, "sequence_length": 32,
           "precision": "fp32"}, open("inputs/job.json", "w"))
json.dump({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 2, "global_batch": 8,
           "stages": [{"layers": [a, b], "tp": 1, "replicas": [{"gpu": "cpu", "zone": "local"}] * 2}
                      for a, b in [(0, 4), (4, 6)]]}, open("dp2pp2.json", "w"))
PY
for i in $(seq "$runs"); do
  rm -rf "out$i" "m$i.jsonl"
  "$run" -q launch --elastic inputs --nprocs 4 --plan dp2pp2.json -- train --model init --data base.txt -o "out$i" \
    --metrics "m$i.jsonl" --seq-len 32 --lr 3e-3 --warmup 1 --threads 1 --log-every 0 --steps 20 --checkpoint-every 1 \
    >/dev/null 2>"err$i" &
  launcher=$!
  for _ in $(seq 600); do
    n=$(grep -c '"step"' "m$i.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 5 ] && break
    sleep 0.02
  done
  pkill -9 -n -f -- "-o out$i --metrics" || true  # the newest: a worker, not the launcher
  wait "$launcher"
done
python3 - "$runs" <<'PY'
import json, statistics, sys
recovery, redone, step_s = [], [], []
for i in range(1, int(sys.argv[1]) + 1):
    lines = [json.loads(l) for l in open(f"m{i}.jsonl")]
    e = [l for l in lines if l.get("event") == "reconfiguration"][0]
    recovery.append(e["recovery_s"]); redone.append(e["steps_redone"])
    step_s += [l["step_s"] for l in lines if "step_s" in l]
print(f"recovery after kill -9 (restart): median {statistics.median(recovery):.2f} s "
      f"[{min(recovery):.2f}, {max(recovery):.2f}] over {len(recovery)} runs; steps redone {redone}; "
      f"median step {statistics.median(step_s) * 1e3:.1f} ms, so recovery = {statistics.median(recovery) / statistics.median(step_s):.0f} steps")
PY
