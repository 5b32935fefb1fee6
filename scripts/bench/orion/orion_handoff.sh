#!/usr/bin/env bash
# What the live scheduler's hand-offs cost a best-effort job, on the stand-in
# driver (tests/orion/fake_cuda), against the simulator on the same workload.
#
# The pair mirrors the H200 run of scripts/bench/orion/orion_gpu.sh at the stand-in's
# time resolution: an HP client serving requests of 12 kernels x 50 us with
# 2 ms of think time, beside a BE job whose iterations are 24 kernels of
# 1.4 ms, each filling the device. Orion's DUR_THRESHOLD (2.5 % of an HP
# request) lets only one such BE kernel be outstanding at a time, so every
# BE kernel waits for the previous one's completion to reach the scheduler
# and its release to reach the client: the simulator counts that hand-off
# as free, the live scheduler cannot. The script prints the BE's throughput
# under `orion` against alone, live and simulated, and the hand-off the
# scheduler's log shows (a BE kernel's release after the previous one's
# completion, and how long a completion took to reach the scheduler). HP
# tails are left out: on a 2-core machine the stand-in's own thread
# scheduling dominates them. The pair runs a second time with
# `--release-ahead-us AHEAD`, which queues the next BE kernel behind the
# running one shortly before it is due to finish, hiding the hand-off.
#
#   scripts/bench/orion/orion_handoff.sh [BUILD_DIR] [HP_REQUESTS]
#   AHEAD=200 ... the release-ahead lead of the second run, in microseconds
#   KEEP=1 ...    keep the logs and reports (the folder is printed)
set -euo pipefail
build=${1:-build}
requests=${2:-400}
. "$(dirname "$0")/stand_in.sh"
export FAKE_CUDA_SHARED_DEVICE="$tmp/device"

hp_kernels=12 hp_us=50 think_us=2000 be_kernels=24 be_us=1400
{
  echo "Name,Profile,Memory_footprint,SM_usage,Duration"
  echo "hpk_0,1,0,132,$((hp_us * 1000))"
} >"$tmp/hp.csv"
{
  echo "Name,Profile,Memory_footprint,SM_usage,Duration"
  echo "bek_0,1,0,132,$((be_us * 1000))"
} >"$tmp/be.csv"
hp="$app --name hpk --distinct 1 --markers --elements 1 --kernels $hp_kernels --duration-us $hp_us --think-us $think_us"
be="$app --name bek --distinct 1 --markers --elements 1 --kernels $be_kernels --duration-us $be_us"

report() {  # label, policy, hp command or "", be command or ""
  local label=$1 policy=$2 args=()
  [ -n "$3" ] && args+=(--hp "$3")
  [ -n "$4" ] && args+=(--be "$4")
  "$orion" exec --policy "$policy" "${args[@]}" --profiles "$5" --device h200 --log "$tmp/$label.log" \
    --report --json "${@:6}" >"$tmp/$label.json" 2>"$tmp/$label.err"
}
ahead=${AHEAD:-200}
report be-alone streams "" "$be --requests 30" "$tmp/be.csv"
report together orion "$hp --requests $requests --ready-file $tmp/ready" "$be --requests 0" "$tmp/hp.csv,$tmp/be.csv"
report together-ahead orion "$hp --requests $requests --ready-file $tmp/ready-ahead" "$be --requests 0" \
  "$tmp/hp.csv,$tmp/be.csv" --release-ahead-us "$ahead"

simulated_pair "$hp_kernels" "$be_kernels" "$think_us" "$requests" 20
"$orion" simulate -w "$tmp/workload.json" -p orion --json >"$tmp/sim.json"

python3 - "$tmp" "$ahead" <<'EOF'
import json, statistics, sys
tmp, ahead = sys.argv[1], sys.argv[2]

def log(label):
    return [json.loads(line) for line in open(f"{tmp}/{label}.log")]

def be_iteration_ms(label):
    lat = [e["latency_ms"] for e in log(label) if e["event"] == "request" and not e["client"].startswith("hp")]
    return statistics.median(lat[2:]) if len(lat) > 2 else float("nan")

def hand_offs(label):
    """Per BE kernel released on a completion: the release after the completion (as the client saw it) and
    how late the completion reached the scheduler; and how many were released ahead instead."""
    events = log(label)
    be_name = next(e["client"] for e in events if e["event"] == "join" and not e["client"].startswith("hp"))
    gaps, seen, ahead_count, last_complete = [], [], 0, None
    for e in events:
        if e.get("client") != be_name:
            continue
        if e["event"] == "complete":
            last_complete = e["t_us"]
            seen.append(e["seen_after_us"])
        elif e["event"] == "release":
            ahead_count += bool(e.get("ahead", False))
            if last_complete is not None and e["wait_us"] > 0 and not e.get("ahead", False):
                gaps.append(e["t_us"] - last_complete)
            last_complete = None
    return gaps, seen, ahead_count

alone_be = be_iteration_ms("be-alone")
sim = json.load(open(f"{tmp}/sim.json"))["rows"]
sim_be = next(r["throughput_vs_dedicated"] for r in sim if r["policy"] == "orion" and r["client"] == "be")
print(f"BE iteration alone {alone_be:.1f} ms; simulated under orion: BE throughput {sim_be:.2f}x alone")
for label, what in (("together", "released on completion"), ("together-ahead", f"released {ahead} us ahead")):
    live_be = be_iteration_ms(label)
    gaps, seen, ahead_count = hand_offs(label)
    line = f"live under orion, {what}: BE iteration {live_be:.1f} ms, throughput {alone_be / live_be:.2f}x alone"
    if gaps:
        line += (f"; {len(gaps)} kernels released on a completion, {statistics.median(gaps):.0f} us (median) after "
                 f"the client saw it, which reached the scheduler {statistics.median(seen):.0f} us later")
    if ahead_count:
        line += f"; {ahead_count} released ahead"
    print(line)
EOF
