#!/usr/bin/env bash
# Usage: check_pipes.sh BIN_DIR SOURCE_DIR WITH_TORCH(0|1) — every program in a
# pipeline: "-" reads standard input or writes standard output, and when data
# goes to stdout the report goes to stderr, so stdout carries the data alone
# (byte-identical to the file the same command writes by name).
set -u
bin=$1 src=$2 torch=$3
source "$(dirname "$0")/testlib.sh"
ex="$src/examples"
set -o pipefail

# sailor-plan: search writes the plan to a pipe; simulate reads it from one.
# (Pipelines of at most two stages: the plumbing is under test, not the
# search, which takes minutes over the whole space in a sanitizer build.)
small=(--max-stages 2)
"$bin/sailor-plan" -q search -i "$ex/sailor/opt-350" "${small[@]}" -o "$tmp/plan.json" >/dev/null || fail "search -o file"
"$bin/sailor-plan" -q search -i "$ex/sailor/opt-350" "${small[@]}" -o - 2>"$tmp/report" >"$tmp/plan-stdout.json" ||
  fail "search -o -"
cmp -s "$tmp/plan.json" "$tmp/plan-stdout.json" || fail "search -o - differs from search -o FILE"
grep -q "^best plan (throughput):" "$tmp/report" || fail "search report did not go to stderr: $(cat "$tmp/report")"
"$bin/sailor-plan" -q search -i "$ex/sailor/opt-350" "${small[@]}" -o - 2>/dev/null |
  "$bin/sailor-plan" simulate -i "$ex/sailor/opt-350" -p - --json >"$tmp/out" || fail "search | simulate -p -"
grep -q '"iteration_s"' "$tmp/out" || fail "simulate of a piped plan: $(cat "$tmp/out")"
"$bin/sailor-plan" import-hf - --name OPT-350 --seq-len 2048 -o - <<'JSON' >"$tmp/model.json" || fail "import-hf - -o -"
{"model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
 "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 512, "do_layer_norm_before": false}
JSON
"$bin/sailor-plan" simulate -i "$ex/sailor/opt-350" --model - -p "$tmp/plan.json" <"$tmp/model.json" >/dev/null ||
  fail "simulate --model -"

# orion-profile: an ncu export through import-ncu into summarize.
"$bin/orion-profile" -q import-ncu - --device a100-40 -o - <"$ex/orion/ncu_sample_raw.csv" |
  "$bin/orion-profile" summarize - >"$tmp/out" || fail "import-ncu - -o - | summarize -"
grep -q "^kernels: *2$" "$tmp/out" || fail "piped profile: $(cat "$tmp/out")"
"$bin/orion-profile" summarize - --json <"$ex/orion/profiles/resnet50_4_fwd.csv" >"$tmp/out" || fail "summarize - --json"
grep -q '"kernels": 175' "$tmp/out" || fail "summarize of stdin: $(cat "$tmp/out")"

# orion-run: workload from stdin, the CSV table to stdout, the table for people to stderr.
"$bin/orion-run" -q simulate -w - --profiles "$ex/orion/profiles" -p orion --requests 60 --csv - \
  <"$ex/orion/rnet50_inf_train.json" 2>"$tmp/report" >"$tmp/table.csv" || fail "simulate -w - --csv -: $(cat "$tmp/report")"
head -n1 "$tmp/table.csv" | grep -q "^policy,client,role," || fail "CSV on stdout: $(head -n2 "$tmp/table.csv")"
grep -q "^orion " "$tmp/report" || fail "simulate report did not go to stderr"

if [ "$torch" = 1 ]; then
  # sailor-run and dz-compress: a corpus through eval; a delta through a pipe into inspect.
  "$bin/sailor-run" -q init --preset tiny --seed 1 -o "$tmp/base" || fail "init"
  "$bin/sailor-run" -q init --preset tiny --seed 2 -o "$tmp/tuned" || fail "init"
  "$bin/sailor-run" -q make-corpus --task copy --lines 40 --seed 3 -o - |
    "$bin/dz-compress" -q eval --model "$tmp/base" --text - --threads 1 >"$tmp/out" || fail "make-corpus | eval --text -"
  grep -q "^text: [0-9]* tokens" "$tmp/out" || fail "eval of piped text: $(cat "$tmp/out")"
  # Training from standard input, stopped and resumed from it again.
  "$bin/sailor-run" -q make-corpus --task base --lines 200 --seed 4 -o "$tmp/corpus.txt" || fail "corpus"
  "$bin/sailor-run" -q train --model "$tmp/base" --data - -o "$tmp/run" --steps 4 --stop-after 2 --batch-size 2 \
    --seq-len 32 --threads 1 <"$tmp/corpus.txt" >/dev/null || fail "train --data -"
  "$bin/sailor-run" train -o "$tmp/run" --resume --threads 1 <"$tmp/corpus.txt" >"$tmp/out" 2>/dev/null ||
    fail "resume of a run trained from stdin"
  grep -q "^trained steps 3-4" "$tmp/out" || fail "resume from stdin: $(cat "$tmp/out")"
  "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/tuned" -o - --bits 4 --sparsity 2:4 \
    --calib-samples 4 --seq-len 32 --threads 1 2>"$tmp/report" | "$bin/dz-compress" inspect - >"$tmp/out" ||
    fail "compress -o - | inspect -: $(cat "$tmp/report")"
  grep -q "^linear layers: [0-9.]* bits/weight" "$tmp/out" || fail "inspect of a piped delta: $(cat "$tmp/out")"
  grep -q "^wrote -: [0-9]* bytes" "$tmp/report" || fail "compress report did not go to stderr: $(cat "$tmp/report")"
fi
[ ! -e "$src/-" ] && [ ! -e ./- ] || fail "a file named '-' was written"
echo "ok: pipelines"
