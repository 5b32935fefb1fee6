#!/usr/bin/env bash
# Builds the toolkit (installing what it needs) and runs the main job of each
# program on the built-in examples: plans, kernel scheduling, and a tiny
# language model trained from scratch with two fine-tuned variants, compressed
# as deltas and served together over the OpenAI-compatible API.
#
#   scripts/demo.sh            FLEET_BUILD_DIR=dir to use another build folder
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FLEET_BUILD_DIR:-build}

scripts/install-deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "=== building in $build (about 16 minutes on two cores the first time; then only what changed)"
cmake --build "$build" -j "${FLEET_JOBS:-2}"
bin="$root/$build/bin"
out="$root/$build/demo"
mkdir -p "$out"

echo
echo "=== sailor-plan: the fastest and the cheapest plan for GPT-Neo-2.7 on 1028 A100-40/V100-16 in 5 zones"
"$bin/sailor-plan" search -i examples/sailor/gpt-neo-2.7 --top 3 -o "$out/gpt_neo_best_plan.json"
"$bin/sailor-plan" -q search -i examples/sailor/gpt-neo-2.7 --objective cost --min-throughput 0.01 | head -n 1
"$bin/sailor-plan" -q search -i examples/sailor/gpt-neo-2.7 --objective cost --min-throughput 0.01 | tail -n 3
echo
echo "=== sailor-plan: OPT-350 on an A100-40 stage + a V100-16 stage over two zones"
"$bin/sailor-plan" simulate -i examples/sailor/opt-350 -p examples/sailor/plans/opt350_a100_v100_two_zones.json \
  --trace "$out/sailor_iteration.json"
echo "timeline of one iteration: $out/sailor_iteration.json (open in ui.perfetto.dev)"
echo
echo "=== sailor-plan: the measured GH200 configuration PP2 x TP4 (measured 0.651 s/iter, 25.5 GiB)"
"$bin/sailor-plan" simulate -i examples/sailor/opt-350 -p examples/sailor/plans/opt350_gh200_pp2.json | tail -n 3
echo
echo "=== sailor-plan calibrate: the simulator on eight measured GH200 runs, each also predicted held out"
"$bin/sailor-plan" -q calibrate -i examples/sailor/opt-350 --runs examples/sailor/opt-350/measured_runs.json

echo
echo "=== sailor-plan in a pipeline: the best plan goes through a pipe into simulate ('-' is stdin/stdout)"
"$bin/sailor-plan" -q search -i examples/sailor/opt-350 -o - 2>/dev/null |
  "$bin/sailor-plan" simulate -i examples/sailor/opt-350 -p - | tail -n 3

echo
echo "=== orion-profile: Orion's ResNet50 training-iteration profile (V100)"
"$bin/orion-profile" summarize examples/orion/profiles/resnet50_32_fb1.csv
echo
echo "=== orion-profile: an Nsight Compute export -> profile (SM need from occupancy on an A100)"
"$bin/orion-profile" -q import-ncu examples/orion/ncu_sample_raw.csv --device a100-40 -o "$out/ncu_profile.csv"
cat "$out/ncu_profile.csv"
echo
echo "=== orion-run: ResNet50 inference (HP, 15 rps) + ResNet50 training (BE) on one V100, every policy"
"$bin/orion-run" -q simulate -w examples/orion/rnet50_inf_train.json -p all \
  --csv "$out/orion_table.csv" --latencies "$out/orion_latencies.csv"
/usr/bin/python3 scripts/plot/orion_results.py --table "$out/orion_table.csv" \
  --latencies "$out/orion_latencies.csv" -o "$out/orion.png"
"$bin/orion-run" -q simulate -w examples/orion/rnet50_inf_train.json -p orion --requests 200 \
  --trace "$out/orion_trace.json" >/dev/null
echo "timeline of the orion policy: $out/orion_trace.json (open in ui.perfetto.dev)"
fake="$root/$build/fake-cuda"
if [ -x "$fake/fake_cuda_app" ]; then
  echo
  echo "=== orion-run exec: two real processes scheduled by kernel (on the tests' stand-in driver, no GPU needed)"
  printf 'Name,Profile,Memory_footprint,SM_usage,Duration\nhpk_0,1,0,132,3000000\nhpk_1,0,0,132,3000000\n' >"$out/hp.csv"
  printf 'Name,Profile,Memory_footprint,SM_usage,Duration\nbek_0,1,0,100,500000\nbek_1,1,0,100,500000\n' >"$out/be.csv"
  for policy in mps orion; do
    # Both processes share one virtual device of 132 SMs, as processes under MPS share a GPU.
    rm -f "$out/fake-device"
    FAKE_CUDA_SHARED_DEVICE="$out/fake-device" ORION_QUIET=1 "$bin/orion-run" exec --policy "$policy" \
      --sm-threshold 50 --profiles "$out/hp.csv,$out/be.csv" --report --alone \
      --hp "$fake/fake_cuda_app --name hpk --markers --requests 20 --kernels 4 --duration-us 3000 --think-us 5000 --grid 1056" \
      --be "$fake/fake_cuda_app --name bek --markers --requests 0 --kernels 8 --duration-us 500 --grid 800" 2>/dev/null |
      grep -v '^requests'
  done
  echo "(under mps the 100-SM best-effort kernels delay the HP kernels, which need all 132 SMs; under orion they"
  echo " are held while an HP request runs, and the HP latency stays at its value alone: p99/alone)"
fi

echo
echo "=== sailor-run + dz-compress: a tiny base model and two fine-tuned variants, trained here (a few minutes)"
models="$out/models"
rm -rf "$models" && mkdir -p "$models"
"$bin/sailor-run" -q init --preset tiny --seed 1 -o "$models/init"
for task in base copy reverse; do
  "$bin/sailor-run" -q make-corpus --task "$task" --lines 4000 --seed 7 -o "$models/$task.txt"
done
"$bin/sailor-run" -q make-corpus --task base --lines 300 --seed 99 -o "$models/base-heldout.txt"
echo "base: 250 steps on the base language (templated sentences)"
"$bin/sailor-run" -q train --model "$models/init" --data "$models/base.txt" -o "$models/base" \
  --steps 250 --batch-size 16 --seq-len 128 --lr 3e-3 --warmup 20 --threads 1
echo "the same 20 steps of pre-training on one process, on 2 data-parallel workers and as a 2-stage pipeline:"
cat >"$models/pp2-plan.json" <<'PLAN'
{"format": "gpufleet-sailor-plan", "version": 1, "mbs": 4, "global_batch": 16,
 "stages": [{"layers": [0, 2], "tp": 1, "replicas": [{"gpu": "cpu", "zone": "local"}]},
            {"layers": [2, 6], "tp": 1, "replicas": [{"gpu": "cpu", "zone": "local"}]}]}
PLAN
common=(--model "$models/init" --data "$models/base.txt" --steps 20 --seq-len 64 --lr 3e-3 --warmup 5)
"$bin/sailor-run" -q train "${common[@]}" --batch-size 4 --grad-accumulation 4 -o "$models/one-process" --threads 1
"$bin/sailor-run" -q launch --nprocs 2 -- train -q "${common[@]}" --batch-size 4 --grad-accumulation 2 \
  -o "$models/data-parallel" --threads 1
"$bin/sailor-run" -q launch --plan "$models/pp2-plan.json" -- train -q "${common[@]}" -o "$models/pipeline" \
  --trace "$out/pipeline_trace.json" --threads 1
echo "pipeline timeline: $out/pipeline_trace.json (open in ui.perfetto.dev)"
echo "elastic: the same 20 steps on 3 workers; one is killed after step 5 and the survivors re-plan and hand its"
echo "part over in place (planner inputs: this machine's compute profile, a fixed 50 GB/s link)"
mkdir -p "$models/inputs"
"$bin/sailor-run" -q profile --model "$models/init" --gpu-type cpu --mbs 1,2,4 --seq-len 64 --repeats 3 --threads 1 \
  -o "$models/inputs/profile.json" >/dev/null
cat >"$models/inputs/cluster.json" <<'CLUSTER'
{"format": "gpufleet-sailor-cluster", "version": 1,
 "gpu_types": {"cpu": {"gpus_per_node": 8, "memory_bytes": 8e9, "price_per_hour": 0}},
 "zones": {"local": {"region": "local", "quotas": {"cpu": 3}}},
 "network": {"intra_node": {"cpu": {"fit": [0, 0, 50], "max_bytes_per_s": 5e10}}, "links": []},
 "egress_usd_per_gb": {"same_zone": 0, "cross_zone": 0, "cross_region": 0}}
CLUSTER
echo '{"format": "gpufleet-sailor-job", "version": 1, "model": "init", "global_batch": 16, "sequence_length": 64,
       "precision": "fp32"}' >"$models/inputs/job.json"
"$bin/sailor-run" -q launch --elastic "$models/inputs" --nprocs 3 -- train -q "${common[@]}" -o "$models/elastic" \
  --metrics "$models/elastic.jsonl" --checkpoint-every 5 --threads 1 2>"$out/elastic.log" &
elastic=$!
for _ in $(seq 1500); do
  n=$(grep -c '"step"' "$models/elastic.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -ge 5 ] && break
  sleep 0.02
done
pkill -9 -n -f -- "-o $models/elastic --metrics" || true
wait "$elastic"
python3 - "$models/elastic.jsonl" "$models/one-process/trainer_state.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for e in (l for l in lines if l.get("event") == "reconfiguration"):
    print(f"  {e['cause']}: {e['workers_after']} worker(s) left, state from {e.get('state_from')}, "
          f"{e.get('steps_redone')} step(s) redone, training again {e.get('recovery_s', 0):.2f} s after the loss")
one = [h["loss"] for h in json.load(open(sys.argv[2]))["history"] if h["step"] == 20][-1]
print(f"  step 20 loss {[l['loss'] for l in lines if l.get('step') == 20][-1]:.6f}; one process: {one:.6f}")
PY
echo "  (the workers' and the controller's log: $out/elastic.log)"
echo "fine-tunes of the base, side by side: copy (1500 steps) and reverse (1000 steps), loss on the answers only"
for spec in copy:1500:1 reverse:1000:0; do
  IFS=: read -r task steps seed <<<"$spec"
  "$bin/sailor-run" -q train --model "$models/base" --data "$models/$task.txt" -o "$models/ft-$task" \
    --steps "$steps" --batch-size 32 --seq-len 28 --lr 1e-3 --warmup 30 --data-mode lines --loss-after " =" \
    --seed "$seed" --threads 1 &
done
wait
for model in base ft-copy ft-reverse; do
  echo "--- $model: perplexity on held-out base text; exact-match accuracy on copy and reverse"
  "$bin/dz-compress" -q eval --model "$models/$model" --text "$models/base-heldout.txt" --task copy --task reverse \
    --samples 100 --threads 1
done
echo "model folders (Hugging Face layout, transformers loads them): $models"

echo
echo "=== dz-compress: the copy fine-tune as a 4-bit 2:4 delta from the base, against round-to-nearest"
for method in obs rtn; do
  "$bin/dz-compress" -q compress --base "$models/base" --target "$models/ft-copy" -o "$models/copy-$method.h5" \
    --bits 4 --sparsity 2:4 --calib "$models/copy.txt" --method "$method" --threads 1
  "$bin/dz-compress" -q decompress "$models/copy-$method.h5" --base "$models/base" -o "$models/copy-from-$method"
  echo "--- the copy fine-tune reconstructed from the $method delta: accuracy on copy"
  "$bin/dz-compress" -q eval --model "$models/copy-from-$method" --task copy --samples 100 --threads 1
done
"$bin/dz-compress" inspect "$models/copy-obs.h5" | tail -n 2
echo "--- the same fine-tune compressed to a size: 7x smaller than the fp16 model, each layer's form chosen"
"$bin/dz-compress" -q compress --base "$models/base" --target "$models/ft-copy" -o "$models/copy-7x.h5" \
  --target-ratio 7 --calib "$models/copy.txt" --threads 1
"$bin/dz-compress" -q decompress "$models/copy-7x.h5" --base "$models/base" -o "$models/copy-from-7x"
"$bin/dz-compress" -q eval --model "$models/copy-from-7x" --task copy --samples 100 --threads 1

echo
echo
echo "=== dz-serve: the base and both fine-tunes from one resident base model (deltas in mixed batches)"
"$bin/dz-compress" -q compress --base "$models/base" --target "$models/ft-reverse" -o "$models/reverse-obs.h5" \
  --bits 4 --sparsity 2:4 --calib "$models/reverse.txt" --threads 1
rm -f "$out/dz-serve.port"
"$bin/dz-serve" -q serve --base "$models/base" --base-name base --delta copy="$models/copy-obs.h5" \
  --delta reverse="$models/reverse-obs.h5" --port 0 --port-file "$out/dz-serve.port" --threads 1 &
server=$!
for _ in $(seq 100); do [ -s "$out/dz-serve.port" ] && break; sleep 0.2; done
url=http://127.0.0.1:$(cat "$out/dz-serve.port")
echo "server at $url; the same prompt to each model (curl, greedy):"
for model in base copy reverse; do
  task=${model/base/copy}
  printf '  %-8s %s -> ' "$model" "$task: stream ="
  curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"$task: stream =\", \"max_tokens\": 8, \"temperature\": 0, \"stop\": \"\\n\"}" |
    /usr/bin/python3 -c 'import json, sys; print(repr(json.load(sys.stdin)["choices"][0]["text"]))'
done
echo "the openai Python client, streaming a chat reply from 'reverse':"
.venv/bin/python - "$url" <<'PY'
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
stream = client.chat.completions.create(model="reverse", messages=[{"role": "user", "content": "reverse: fleet ="}],
                                        max_tokens=12, temperature=0, stream=True)
print("  " + repr("".join(c.choices[0].delta.content or "" for c in stream if c.choices)))
PY
echo "load test, 10 s at 8 requests/s, Zipf popularity over the three models:"
"$bin/dz-serve" -q bench --url "$url" --variants copy,reverse,base --rate 8 --duration 10 --popularity zipf:1.0 \
  --max-tokens 8 --prompts "$models/copy.txt"
curl -s "$url/metrics" | grep -E '^dz_(requests_total|resident_bytes|delta_loads_total)'
kill -TERM "$server" && wait "$server"
echo "demo: done (binaries in $build/bin, outputs in $build/demo)"
