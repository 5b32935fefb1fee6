# Sourced by the benchmarks that run `orion-run exec` on the stand-in driver
# (tests/orion/fake_cuda), with $build set: the test program and orion-run
# of that build ($app, $orion), quiet logs, and a scratch folder $tmp,
# removed at exit unless KEEP is set.
app="$build/fake-cuda/fake_cuda_app"
orion="$build/bin/orion-run"
[ -x "$app" ] || { echo "no $app: build with the CUDA toolkit's headers present" >&2; exit 2; }
export ORION_QUIET=1
tmp=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

# The simulator's view of a stand-in pair whose one-kernel profiles are
# $tmp/hp.csv and $tmp/be.csv: $tmp/hp_req.csv and $tmp/be_iter.csv list a
# request's / an iteration's kernels, and $tmp/workload.json runs them as a
# closed-loop HP client with think time beside a closed-loop BE job.
#   simulated_pair HP_KERNELS BE_KERNELS THINK_US HP_REQUESTS HP_WARMUP
simulated_pair() {
  local name kernels out
  for name in hp:"$1":hp_req be:"$2":be_iter; do
    IFS=: read -r name kernels out <<<"$name"
    { head -1 "$tmp/$name.csv"; for _ in $(seq "$kernels"); do tail -1 "$tmp/$name.csv"; done; } >"$tmp/$out.csv"
  done
  cat >"$tmp/workload.json" <<EOF
{"format": "gpufleet-orion-workload", "version": 1, "device": "h200", "seed": 1, "launch_overhead_us": 5,
 "clients": [
  {"name": "be", "profile": "$tmp/be_iter.csv", "priority": "best-effort", "kind": "training",
   "arrivals": {"type": "closed"}, "warmup": 2},
  {"name": "hp", "profile": "$tmp/hp_req.csv", "priority": "high", "kind": "inference",
   "arrivals": {"type": "closed"}, "gap_ms": $(awk "BEGIN {print $3 / 1000}"), "requests": $4, "warmup": $5}]}
EOF
}
