#!/usr/bin/env bash
# sailor-run's distributed training against PyTorch on the same CPU, in one run:
#  1. data parallelism: N=2 workers, tokens/s of `sailor-run launch --nprocs 2
#     -- train` against PyTorch's DistributedDataParallel (Gloo) on the same
#     model, micro-batch and sequence length (target: ratio >= 1.0);
#  2. background checkpoints: the same run with a checkpoint every step
#     against none (target: at most +10 % step time);
#  3. the planner against the runtime: `sailor-run profile` + `profile-net`
#     measured here, then `sailor-plan simulate` of a DP=2 and a PP=2 plan
#     against their measured iteration time.
#   scripts/bench/sailor/sailor_run.sh [BUILD_DIR]     PRESET=small STEPS=30 BATCH=8 SEQ=128
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
python=${FLEET_PYTHON:-$root/.venv/bin/python}
preset=${PRESET:-small} steps=${STEPS:-30} batch=${BATCH:-8} seq=${SEQ:-128} warm=5
cmake --build "$build" -j "${FLEET_JOBS:-2}" --target sailor-run sailor-plan >/dev/null
run="$build/bin/sailor-run"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" -q init --preset "$preset" -o "$tmp/model"
"$run" -q make-corpus --task base --lines 20000 -o "$tmp/base.txt"

# Median tokens/s of a metrics file, the first $warm steps left out.
median_rate() {
  /usr/bin/python3 - "$1" "$warm" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
print(statistics.median(l["tokens_per_s"] for l in lines), statistics.median(l["step_s"] for l in lines))
PY
}
train() {  # train NAME "LAUNCH OPTIONS" TRAIN OPTIONS... -> metrics in $tmp/NAME.jsonl
  local name=$1 launch=$2
  shift 2
  # shellcheck disable=SC2086
  "$run" -q launch $launch -- train -q --model "$tmp/model" --data "$tmp/base.txt" -o "$tmp/$name" --force \
    --steps $((steps + warm)) --seq-len "$seq" --threads 1 --lr 1e-4 --metrics "$tmp/$name.jsonl" "$@" >/dev/null
}

echo "== data parallelism, 2 workers, $preset preset, micro-batch $batch x $seq tokens, 1 thread each"
train dp "--nprocs 2" --batch-size "$batch"
read -r ours ours_step < <(median_rate "$tmp/dp.jsonl")
theirs=$("$python" "$root/scripts/bench/sailor/ddp_baseline.py" "$tmp/model" 2 "$batch" "$seq" "$steps" "$warm" 2>/dev/null |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["tokens_per_s"])')
/usr/bin/python3 -c "import sys; o, t = map(float, sys.argv[1:]); print(f'sailor-run {o:9.0f} tokens/s   PyTorch DDP {t:9.0f} tokens/s   ratio {o / t:.2f}x')" "$ours" "$theirs"

echo "== background checkpoints: one every step against none (same DP=2 job)"
train ckpt "--nprocs 2" --batch-size "$batch" --checkpoint-every 1
read -r _ ckpt_step < <(median_rate "$tmp/ckpt.jsonl")
/usr/bin/python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'step {a * 1e3:.1f} ms without, {b * 1e3:.1f} ms with a checkpoint every step: {100 * (b / a - 1):+.1f} %')" "$ours_step" "$ckpt_step"

echo "== the planner's prediction against the runtime (global batch $((2 * batch)), mbs $((batch / 2)))"
mkdir -p "$tmp/inputs"
"$run" -q profile --model "$tmp/model" --gpu-type cpu --mbs "$((batch / 2))" --seq-len "$seq" --threads 1 \
  -o "$tmp/inputs/profile.json" >/dev/null
"$run" -q launch --nprocs 2 -- profile-net -q --gpu-type cpu -o "$tmp/inputs/cluster.json" >/dev/null
layers=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["layers"]))' "$tmp/inputs/model.json")
cat >"$tmp/inputs/job.json" <<JOB
{"format": "gpufleet-sailor-job", "version": 1, "model": "model", "global_batch": $((2 * batch)),
 "sequence_length": $seq, "precision": "fp32"}
JOB
for layout in dp2 pp2; do
  /usr/bin/python3 - "$layout" "$layers" "$((batch / 2))" "$((2 * batch))" >"$tmp/$layout-plan.json" <<'PY'
import json, sys
layout, layers, mbs, gb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cpu = {"gpu": "cpu", "zone": "local"}
splits = [(0, layers)] if layout == "dp2" else [(0, layers // 2), (layers // 2, layers)]
dp = 2 if layout == "dp2" else 1
print(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": mbs, "global_batch": gb,
                  "stages": [{"layers": [a, b], "tp": 1, "replicas": [cpu] * dp} for a, b in splits]}))
PY
  train "$layout" "--plan $tmp/$layout-plan.json"
  read -r _ measured < <(median_rate "$tmp/$layout.jsonl")
  predicted=$("$build/bin/sailor-plan" simulate -i "$tmp/inputs" -p "$tmp/$layout-plan.json" --json |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["iteration_s"])')
  /usr/bin/python3 -c "import sys; n, m, p = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]); print(f'{n}: measured {m * 1e3:.1f} ms per iteration, predicted {p * 1e3:.1f} ms ({100 * (p / m - 1):+.0f} %)')" "$layout" "$measured" "$predicted"
done
