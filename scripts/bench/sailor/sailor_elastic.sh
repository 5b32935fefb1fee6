#!/usr/bin/env bash
# Recovery of an elastic job after kill -9 of one of 4 workers (tiny model,
# loopback, one CPU thread each): the time from the failure to the first
# finished step of the new generation, and the steps redone, over RUNS runs
# of each recovery — "inplace" (survivors hand their state over) and
# "restart" (every worker restarts from the last checkpoint, as torchrun's
# elastic agent does) — alternating, so both see the same machine. Reports
# the ratio of the medians and the step time of the same job.
#
#   scripts/bench/sailor/sailor_elastic.sh [BUILD_DIR] [RUNS]
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
  for recovery in inplace restart; do
    name="$recovery$i"
    rm -rf "$name" "$name.jsonl"
    "$run" -q launch --elastic inputs --recovery "$recovery" --nprocs 4 --plan dp2pp2.json -- train --model init \
      --data base.txt -o "$name" --metrics "$name.jsonl" --seq-len 32 --lr 3e-3 --warmup 1 --threads 1 --log-every 0 \
      --steps 20 --checkpoint-every 1 >/dev/null 2>"$name.err" &
    launcher=$!
    for _ in $(seq 600); do
      n=$(grep -c '"step"' "$name.jsonl" 2>/dev/null || true)
      [ "${n:-0}" -ge 5 ] && break
      sleep 0.02
    done
    pkill -9 -n -f -- "-o $name --metrics" || true  # the newest: a worker, not the launcher
    wait "$launcher"
  done
done
python3 - "$runs" <<'PY'
import json, statistics, sys
runs = int(sys.argv[1])
median = {}
for recovery in ("inplace", "restart"):
    times, redone, step_s, source = [], [], [], []
    for i in range(1, runs + 1):
        lines = [json.loads(l) for l in open(f"{recovery}{i}.jsonl")]
        e = [l for l in lines if l.get("event") == "reconfiguration"][0]
        times.append(e["recovery_s"]); redone.append(e["steps_redone"]); source.append(e.get("state_from", "checkpoint"))
        step_s += [l["step_s"] for l in lines if "step_s" in l]
    median[recovery] = statistics.median(times)
    print(f"recovery after kill -9 ({recovery}): median {median[recovery]:.2f} s [{min(times):.2f}, {max(times):.2f}] "
          f"over {runs} runs; steps redone {redone}; state from {sorted(set(source))}; "
          f"median step {statistics.median(step_s) * 1e3:.1f} ms")
print(f"inplace / restart recovery time: {median['inplace'] / median['restart']:.2f}")
PY
