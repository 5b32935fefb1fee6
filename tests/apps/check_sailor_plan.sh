#!/usr/bin/env bash
# Usage: check_sailor_plan.sh BIN_DIR SOURCE_DIR — sailor-plan end to end on
# the examples: simulate, trace, export to SAILOR's layout and back, bad input.
set -u
bin=$1 src=$2
ex="$src/examples/sailor"
source "$(dirname "$0")/testlib.sh"

plan="$ex/plans/opt350_a100_v100_two_zones.json"
expect_rc 0 "$bin/sailor-plan" simulate -i "$ex/opt-350" -p "$plan" --trace "$tmp/trace.json"
grep -q "^iteration: " "$tmp/out" || fail "no iteration line: $(cat "$tmp/out")"
grep -q "every GPU fits" "$tmp/out" || fail "memory line"
grep -q '"traceEvents"' "$tmp/trace.json" || fail "trace"
expect_rc 0 "$bin/sailor-plan" simulate -i "$ex/opt-350" -p "$plan" --json
before=$(grep -o '"iteration_s": [0-9.e+-]*' "$tmp/out")
[ -n "$before" ] || fail "--json lacks iteration_s"

# Export to SAILOR's layout, simulate that: same prediction.
expect_rc 0 "$bin/sailor-plan" export -i "$ex/opt-350" -p "$plan" --format sailor -o "$tmp/sailor_plan.json"
grep -q '"pipeline_list"' "$tmp/sailor_plan.json" || fail "export layout"
expect_rc 0 "$bin/sailor-plan" simulate -i "$ex/opt-350" -p "$tmp/sailor_plan.json" --json
after=$(grep -o '"iteration_s": [0-9.e+-]*' "$tmp/out")
[ "$before" = "$after" ] || fail "SAILOR-layout plan simulates differently: $before vs $after"

# Bad input: one error line naming the file and field, exit 2, earlier output untouched.
cp "$tmp/sailor_plan.json" "$tmp/keep.json"
sed 's/"V100-16"/"H800-80"/' "$plan" > "$tmp/bad_plan.json"
expect_rc 2 "$bin/sailor-plan" export -i "$ex/opt-350" -p "$tmp/bad_plan.json" -o "$tmp/sailor_plan.json"
grep -q "^sailor-plan: error: .*bad_plan.json: stage 1: unknown GPU type 'H800-80'" "$tmp/err" || fail "unknown GPU message: $(cat "$tmp/err")"
cmp -s "$tmp/sailor_plan.json" "$tmp/keep.json" || fail "failed export touched the earlier output"
mkdir "$tmp/in"
cp "$ex/opt-350/"*.json "$tmp/in/"
sed -i 's/"price_per_hour": 2.8/"price_per_hour": -2.8/' "$tmp/in/cluster.json"
expect_rc 2 "$bin/sailor-plan" simulate -i "$tmp/in" -p "$plan"
grep -q "cluster.json: /gpu_types/V100-16/price_per_hour: price cannot be negative" "$tmp/err" || fail "negative price: $(cat "$tmp/err")"
expect_rc 2 "$bin/sailor-plan" simulate -p "$plan"
grep -q "give --inputs DIR or --model" "$tmp/err" || fail "missing inputs message"
expect_rc 2 "$bin/sailor-plan" simulate -i "$tmp/nowhere" -p "$plan"

# search (kept small so the sanitizer build stays quick): the best plan is
# written, and simulating it gives its predictions back.
small=(--max-stages 3 --max-gpus 64)
expect_rc 0 "$bin/sailor-plan" search -i "$ex/gpt-neo-2.7" "${small[@]}" --top 3 -o "$tmp/best.json"
grep -q "^best plan (throughput):" "$tmp/out" || fail "search output: $(head -3 "$tmp/out")"
grep -q '"predictions"' "$tmp/best.json" || fail "best plan lacks predictions"
predicted=$(/usr/bin/python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['predictions']['iteration_s'], 9))" "$tmp/best.json")
expect_rc 0 "$bin/sailor-plan" simulate -i "$ex/gpt-neo-2.7" -p "$tmp/best.json" --json
simulated=$(/usr/bin/python3 -c "import json,sys; print(round(json.load(sys.stdin)['iteration_s'], 9))" < "$tmp/out")
[ "$predicted" = "$simulated" ] || fail "search predicted $predicted s, simulate says $simulated s"
expect_rc 0 "$bin/sailor-plan" search -i "$ex/gpt-neo-2.7" --objective cost --max-stages 3 --max-gpus 16 --json
expect_rc 3 "$bin/sailor-plan" search -i "$ex/gpt-neo-2.7" --objective cost --min-throughput 1000 --max-stages 2 --max-gpus 16
grep -q "^sailor-plan: error: no plan meets the bounds" "$tmp/err" || fail "exit-3 reason: $(cat "$tmp/err")"
expect_rc 2 "$bin/sailor-plan" search -i "$ex/gpt-neo-2.7" --exhaustive
grep -q "exhaustive would simulate about" "$tmp/err" || fail "exhaustive guard: $(cat "$tmp/err")"
expect_rc 2 "$bin/sailor-plan" search -i "$ex/gpt-neo-2.7" --objective speed

# calibrate: the shipped constants on the eight measured GH200 runs, each also held out.
expect_rc 0 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$ex/opt-350/measured_runs.json" --json
/usr/bin/python3 - "$tmp/out" <<'PY' || fail "calibrate: $(head -c 600 "$tmp/out")"
import json, sys
j = json.load(open(sys.argv[1]))
e = j["mean_abs_error"]
assert len(j["runs"]) == 8 and e["held_out_time"] < 0.06 and e["held_out_memory"] < 0.03, e
PY
# --hold-out: fitted on five runs, the other three predicted with those
# constants and never fitted to (here a second copy of OPT-350's inputs
# stands for another model): the fit matches a calibrate on the five alone.
mkdir -p "$tmp/five" "$tmp/three"
cp "$ex/opt-350/"{model,profile,cluster,job}.json "$tmp/three/"
/usr/bin/python3 - "$ex/opt-350/measured_runs.json" "$tmp/five/runs.json" "$tmp/three/measured_runs.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
json.dump(dict(r, runs=r["runs"][:5]), open(sys.argv[2], "w"))
json.dump(dict(r, runs=r["runs"][5:]), open(sys.argv[3], "w"))
PY
expect_rc 0 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/five/runs.json" --json
cp "$tmp/out" "$tmp/five.json"
expect_rc 0 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/five/runs.json" --hold-out "$tmp/three" --json
/usr/bin/python3 - "$tmp/five.json" "$tmp/out" <<'PY' || fail "calibrate --hold-out: $(head -c 600 "$tmp/out")"
import json, sys
five, held = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert held["fitted"] == five["fitted"], (held["fitted"], five["fitted"])
h = held["hold_out"]
assert five["hold_out"] is None and len(h["runs"]) == 3 and h["model"] == "OPT-350", h
errors = [abs(r["predicted_s"] / r["measured_s"] - 1) for r in h["runs"]]
assert abs(sum(errors) / 3 - h["mean_abs_error"]["time"]) < 1e-12, (errors, h["mean_abs_error"])
PY
expect_rc 0 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/five/runs.json" --hold-out "$tmp/three"
grep -q "mean absolute error on the held-out model" "$tmp/out" || fail "calibrate --hold-out text: $(cat "$tmp/out")"
expect_rc 2 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/five/runs.json" --hold-out-runs "$tmp/x.json"
expect_rc 2 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/five/runs.json" --hold-out "$tmp/nowhere"
echo '{"format": "gpufleet-sailor-runs", "version": 1, "runs": []}' > "$tmp/no_runs.json"
expect_rc 2 "$bin/sailor-plan" calibrate -i "$ex/opt-350" --runs "$tmp/no_runs.json"
grep -q "lists no run" "$tmp/err" || fail "calibrate with no runs: $(cat "$tmp/err")"

# import-sailor from SAILOR's data as the repository ships it reproduces the examples.
ref="$ex/sailor-data"
expect_rc 0 "$bin/sailor-plan" import-sailor "$ref" -m GPT-Neo-2.7 -o "$tmp/neo"
for f in model profile cluster job; do cmp -s "$tmp/neo/$f.json" "$ex/gpt-neo-2.7/$f.json" || fail "import of $f.json differs from the example"; done
expect_rc 2 "$bin/sailor-plan" import-sailor "$ref" -m GPT-Neo-2.7 -o "$tmp/neo" --price A100-40=-1
expect_rc 2 "$bin/sailor-plan" import-sailor "$ref" -m NoSuchModel -o "$tmp/x"
# A model.json derived from OPT-350's Hugging Face config simulates the same plan
# close to SAILOR's own description (same layer count; activations within a few %).
cat > "$tmp/opt_config.json" <<'JSON'
{"model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
 "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 512, "do_layer_norm_before": false}
JSON
expect_rc 0 "$bin/sailor-plan" import-hf "$tmp/opt_config.json" --name OPT-350 --seq-len 2048 -o "$tmp/opt_model.json"
grep -q '"format": "gpufleet-sailor-model"' "$tmp/opt_model.json" || fail "import-hf output format"
expect_rc 0 "$bin/sailor-plan" simulate -i "$ex/opt-350" --model "$tmp/opt_model.json" -p "$plan" --json
grep -q '"iteration_s"' "$tmp/out" || fail "simulate with the derived model"
echo '{"model_type": "t5"}' > "$tmp/t5.json"
expect_rc 2 "$bin/sailor-plan" import-hf "$tmp/t5.json" -o "$tmp/t5_model.json"
grep -q "unsupported model_type 't5'" "$tmp/err" || fail "import-hf family message: $(cat "$tmp/err")"
[ ! -e "$tmp/t5_model.json" ] || fail "failed import-hf wrote a file"

# Memory against SAILOR's own estimates (scripts/bench/sailor/sailor_memory_rules.py):
# our transcription of SAILOR's simulator rule must reproduce the 5.6 % mean
# error SAILOR reports on the measured runs (an outside figure), ours must
# stay within 2 %, and SAILOR's 128-A100 GPT-Neo-2.7 plan must not fit by
# either (its planner accepted it with a looser rule).
python3 "$src/scripts/bench/sailor/sailor_memory_rules.py" "$bin" "$src" >"$tmp/rules" 2>"$tmp/err" || fail "sailor_memory_rules.py: $(cat "$tmp/err")"
mae=$(grep '^| mean absolute error' "$tmp/rules" | tr -d '%|' | awk '{print $4, $5, $6}')
read -r ours sailor_sim sailor_planner <<<"$mae"
awk -v o="$ours" -v s="$sailor_sim" -v p="$sailor_planner" 'BEGIN { exit !(o <= 2 && s >= 5.5 && s <= 5.7 && p > 10) }' ||
  fail "memory errors ours / SAILOR simulator / planner: $mae"
neo=$(grep '^| neo_a128 |' "$tmp/rules")
[[ "$neo" =~ \|\ [0-9.]+\ \(1[0-9][0-9]\ %\)\ \|\ [0-9.]+\ \(10[1-9]\ %\) ]] || fail "neo_a128 row: $neo"

echo "ok: sailor-plan"
