#!/usr/bin/env bash
# Search time of `sailor-plan search` (one thread) on the clusters of the
# planner's targets, built from the shipped inputs by changing the quotas.
# Reference: the original SAILOR planner reports 1.6 s / 7.7 s / 17.4 s for
# GPT-Neo-2.7 on 32+96 / 80+240 / 128+384 A100-40+V100-16, about 4900 s for
# three GPU types of 256 each.
#   scripts/bench/sailor/sailor_search.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j "${FLEET_JOBS:-2}" --target sailor-plan >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# make_inputs NAME MODEL_DIR 'GPU@ZONE=N ...'
make_inputs() {
  local name=$1 model=$2 quotas=$3
  mkdir -p "$tmp/$name"
  cp "$root/examples/sailor/$model/"{model,profile,job}.json "$tmp/$name/"
  /usr/bin/python3 - "$root/examples/sailor/opt-350/cluster.json" "$tmp/$name/cluster.json" $quotas <<'PY'
import json, sys
cluster = json.load(open(sys.argv[1]))
for zone in cluster["zones"].values():
    zone["quotas"] = {}
for spec in sys.argv[3:]:
    key, n = spec.split("=")
    gpu, zone = key.split("@")
    cluster["zones"][zone]["quotas"][gpu] = int(n)
cluster["zones"] = {z: v for z, v in cluster["zones"].items() if v["quotas"]}
json.dump(cluster, open(sys.argv[2], "w"))
PY
}

run() {
  local label=$1 name=$2 objective=${3:-throughput}
  local start end
  start=$(date +%s.%N)
  taskset -c 0 "$build/bin/sailor-plan" -q search -i "$tmp/$name" --objective "$objective" --json >"$tmp/out.json"
  end=$(date +%s.%N)
  /usr/bin/python3 - "$tmp/out.json" "$label" "$objective" "$start" "$end" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
p = out["plans"][0]
pred = p["predictions"]
print(f"{sys.argv[2]:44s} {sys.argv[3]:10s} search {out['search_s']:7.3f} s (process {float(sys.argv[5]) - float(sys.argv[4]):6.2f} s)"
      f"  {out['searched']:8d} plans  best: {len(p['stages'])} stages x DP {len(p['stages'][0]['replicas'])}, "
      f"{pred['gpus']} GPUs, {pred['iterations_per_s']:.3f} it/s, ${pred['usd_per_iteration']:.4f}/it")
PY
}

c=us-central1-a
make_inputs opt_a32 opt-350 "A100-40@$c=32"
make_inputs opt_a128 opt-350 "A100-40@$c=128"
make_inputs opt_a32_v96 opt-350 "A100-40@$c=32 V100-16@$c=96"
make_inputs opt_a80_v240 opt-350 "A100-40@$c=80 V100-16@$c=240"
make_inputs opt_a128_v384 opt-350 "A100-40@$c=128 V100-16@$c=384"
make_inputs opt_a128x5 opt-350 "A100-40@us-central1-a=128 A100-40@us-central1-b=128 A100-40@us-central1-c=128 A100-40@us-central1-f=128 A100-40@us-west1-b=128"
make_inputs neo_a32_v96 gpt-neo-2.7 "A100-40@$c=32 V100-16@$c=96"
make_inputs neo_a80_v240 gpt-neo-2.7 "A100-40@$c=80 V100-16@$c=240"
make_inputs neo_a128_v384 gpt-neo-2.7 "A100-40@$c=128 V100-16@$c=384"
make_inputs opt_3x256 opt-350 "A100-40@$c=256 V100-16@$c=256 GH-96@$c=256"

run "OPT-350, 32 A100-40" opt_a32
run "OPT-350, 128 A100-40" opt_a128
run "OPT-350, 32 A100-40 + 96 V100-16" opt_a32_v96
run "OPT-350, 80 A100-40 + 240 V100-16" opt_a80_v240
run "OPT-350, 128 A100-40 + 384 V100-16" opt_a128_v384
run "OPT-350, 5 zones x 128 A100-40 (2 regions)" opt_a128x5
run "GPT-Neo-2.7, 32 A100-40 + 96 V100-16" neo_a32_v96
run "GPT-Neo-2.7, 80 A100-40 + 240 V100-16" neo_a80_v240
run "GPT-Neo-2.7, 128 A100-40 + 384 V100-16" neo_a128_v384
run "OPT-350, 256 each of A100-40, V100-16, GH-96" opt_3x256
run "GPT-Neo-2.7, 128 A100-40 + 384 V100-16" neo_a128_v384 cost
