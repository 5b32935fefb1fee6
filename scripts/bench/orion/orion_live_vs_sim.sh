#!/usr/bin/env bash
# Each policy live on the stand-in driver (tests/orion/fake_cuda) against the
# simulator on the same profiles: the HP client's p99 and the BE job's
# throughput, live and simulated, and their ratio.
#
# The pair is the one scripts/demo.sh runs: an HP client serving requests of
# 4 kernels x 3 ms that each need the whole device (132 SMs of an H200),
# with 5 ms of think time, beside a BE job whose iterations are 8 kernels of
# 0.5 ms on 100 SMs. Both processes share one virtual device
# (FAKE_CUDA_SHARED_DEVICE), as processes under MPS share a GPU. Kernels are
# milliseconds long so that the host's thread scheduling (tens of
# microseconds on an idle machine) stays small beside them; on a loaded
# machine it does not, which is why this is a benchmark and not a test.
#
#   scripts/bench/orion/orion_live_vs_sim.sh [BUILD_DIR] [HP_REQUESTS] [POLICIES]
#   POLICIES: comma-separated (default temporal,streams,mps,reef,orion)
#   HP_SMS, BE_SMS ... SMs each client's kernels need (default 132, 100)
#   BE_PROFILE ...     the BE kernels' class in the profile: 1 compute-bound
#                      (default), 0 memory-bound
#   KEEP=1 ... keep the reports (the folder is printed)
set -euo pipefail
build=${1:-build}
requests=${2:-200}
policies=${3:-temporal,streams,mps,reef,orion}
. "$(dirname "$0")/stand_in.sh"

hp_kernels=4 hp_us=3000 think_us=5000 be_kernels=8 be_us=500
hp_sms=${HP_SMS:-132} be_sms=${BE_SMS:-100} be_class=${BE_PROFILE:-1}
printf 'Name,Profile,Memory_footprint,SM_usage,Duration\nhpk_0,1,0,%d,%d\n' "$hp_sms" $((hp_us * 1000)) >"$tmp/hp.csv"
printf 'Name,Profile,Memory_footprint,SM_usage,Duration\nbek_0,%d,0,%d,%d\n' "$be_class" "$be_sms" $((be_us * 1000)) \
  >"$tmp/be.csv"
# 256-thread blocks, 8 to an SM on the stand-in: a grid of 8 x SMs needs that many SMs.
hp="$app --name hpk --distinct 1 --markers --requests $requests --kernels $hp_kernels --duration-us $hp_us --think-us $think_us --grid $((hp_sms * 8))"
be="$app --name bek --distinct 1 --markers --requests 0 --kernels $be_kernels --duration-us $be_us --grid $((be_sms * 8))"

simulated_pair "$hp_kernels" "$be_kernels" "$think_us" "$requests" 0
# The stand-in's device: an SM holds one kernel's blocks at a time and
# co-running kernels do not slow each other, so the simulator runs with
# that device model too (the comparison is of the schedulers, not of the
# contention model).
cat >"$tmp/exclusive.json" <<EOF
{"format": "gpufleet-orion-contention", "version": 1, "device": "h200",
 "source": "the stand-in driver's device: SMs held whole by one kernel, no interference",
 "compute_use": {"compute": 0.5, "memory": 0.5, "unknown": 0.5},
 "memory_use": {"compute": 0.5, "memory": 0.5, "unknown": 0.5},
 "same_class_penalty": 0, "unit_share": {"compute": 1.0, "memory": 1.0, "unknown": 1.0}}
EOF
"$orion" simulate -w "$tmp/workload.json" -p "dedicated,$policies" --contention "$tmp/exclusive.json" --json \
  >"$tmp/sim.json"

first=1
for policy in ${policies//,/ }; do
  args=()
  [ -n "$first" ] && args+=(--alone)  # the clients alone once, for the ratios
  rm -f "$tmp/device"
  FAKE_CUDA_SHARED_DEVICE="$tmp/device" FAKE_CUDA_DISPATCH=blocks "$orion" exec --policy "$policy" --profiles "$tmp/hp_req.csv,$tmp/be_iter.csv" \
    --device h200 --contention "$tmp/exclusive.json" --hp "$hp" --be "$be" --report --json "${args[@]}" >"$tmp/$policy.json" 2>"$tmp/$policy.err" ||
    { echo "orion-run exec --policy $policy failed:" >&2; tail -3 "$tmp/$policy.err" >&2; exit 1; }
  # the test program prints its checksum lines on stdout before the report
  sed -n '/^{/,$p' "$tmp/$policy.json" >"$tmp/$policy.report.json"
  first=
done

python3 - "$tmp" "$policies" <<'EOF'
import json, sys
tmp, policies = sys.argv[1], sys.argv[2].split(",")
sim = json.load(open(f"{tmp}/sim.json"))["rows"]
def sim_row(policy, client):
    return next(r for r in sim if r["policy"] == policy and r["client"] == client)
live_alone = {}
print(f"{'policy':10} {'HP p99 live':>11} {'sim':>7} {'live/sim':>8}   {'BE thru live':>12} {'sim':>6}")
for policy in ["alone"] + policies:
    label = policies[0] if policy == "alone" else policy
    rows = json.load(open(f"{tmp}/{label}.report.json"))["rows"]
    hp = next(r for r in rows if r["policy"] == policy and r["role"] == "high")
    be = next(r for r in rows if r["policy"] == policy and r["role"] == "best-effort")
    if policy == "alone":
        live_alone = {"hp": hp["p99_ms"], "be": be["throughput_per_s"]}
        s_hp, s_be = sim_row("dedicated", "hp"), sim_row("dedicated", "be")
        be_live, be_sim = 1.0, 1.0
    else:
        s_hp, s_be = sim_row(policy, "hp"), sim_row(policy, "be")
        be_live, be_sim = be["throughput_per_s"] / live_alone["be"], s_be["throughput_vs_dedicated"]
    print(f"{policy:10} {hp['p99_ms']:8.2f} ms {s_hp['p99_ms']:7.2f} {hp['p99_ms'] / s_hp['p99_ms']:8.2f}   "
          f"{be_live:11.2f}x {be_sim:5.2f}x")
EOF
