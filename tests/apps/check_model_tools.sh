#!/usr/bin/env bash
# Usage: check_model_tools.sh BIN_DIR [PYTHON] — sailor-run init / make-corpus /
# train and dz-compress eval end to end on a tiny model, bad input, and (with
# PYTHON) transformers loading the folder sailor-run wrote, tokenizer included.
set -u
bin=$1 python=${2:-}
source "$(dirname "$0")/testlib.sh"

expect_rc 0 "$bin/sailor-run" init --preset tiny -o "$tmp/m0" --seed 4
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  [ -f "$tmp/m0/$f" ] || fail "init did not write $f"
done
cp "$tmp/m0/model.safetensors" "$tmp/m0.keep"
# An existing folder is never replaced without --force; unknown presets are usage errors.
expect_rc 2 "$bin/sailor-run" init --preset tiny -o "$tmp/m0" --seed 5
grep -q "^sailor-run: error: .*exists and is not empty; pass --force" "$tmp/err" || fail "overwrite message: $(cat "$tmp/err")"
cmp -s "$tmp/m0/model.safetensors" "$tmp/m0.keep" || fail "refused init changed the model"
expect_rc 2 "$bin/sailor-run" init --preset huge -o "$tmp/m1"
grep -q "unknown model preset 'huge'" "$tmp/err" || fail "preset message: $(cat "$tmp/err")"
[ ! -e "$tmp/m1" ] || fail "failed init left a folder"

expect_rc 0 "$bin/sailor-run" make-corpus --task base --lines 400 --seed 2 -o "$tmp/base.txt"
[ "$(wc -l < "$tmp/base.txt")" -eq 400 ] || fail "corpus line count"
expect_rc 2 "$bin/sailor-run" make-corpus --task poetry -o "$tmp/x.txt"

expect_rc 0 "$bin/sailor-run" train --model "$tmp/m0" --data "$tmp/base.txt" -o "$tmp/run" --steps 12 \
  --batch-size 4 --seq-len 64 --lr 3e-3 --warmup 2 --stop-after 6 --threads 1 --json
grep -q '"last_step": 6' "$tmp/out" || fail "stop-after: $(cat "$tmp/out")"
expect_rc 0 "$bin/sailor-run" train -o "$tmp/run" --resume --threads 1
grep -q "^trained steps 7-12: loss" "$tmp/out" || fail "resume summary: $(cat "$tmp/out")"
expect_rc 2 "$bin/sailor-run" train --model "$tmp/m0" --data "$tmp/missing.txt" -o "$tmp/run2" --steps 2 --threads 1
grep -q "missing.txt" "$tmp/err" || fail "missing data message: $(cat "$tmp/err")"

expect_rc 0 "$bin/dz-compress" eval --model "$tmp/run" --text "$tmp/base.txt" --task copy --samples 5 --threads 1
grep -q "^text: [0-9]* tokens, mean NLL [0-9.]* nats/token, perplexity [0-9.]*$" "$tmp/out" || fail "eval text line: $(cat "$tmp/out")"
grep -q "^copy: [0-9]*/5 exact" "$tmp/out" || fail "eval task line: $(cat "$tmp/out")"
expect_rc 0 "$bin/dz-compress" eval --model "$tmp/run" --text "$tmp/base.txt" --json --threads 1
grep -q '"perplexity"' "$tmp/out" || fail "eval --json"
# Trained perplexity is far below the untrained model's (about the vocabulary size).
trained=$(sed -n 's/.*"perplexity": \([0-9.]*\).*/\1/p' "$tmp/out")
expect_rc 0 "$bin/dz-compress" eval --model "$tmp/m0" --text "$tmp/base.txt" --json --threads 1
untrained=$(sed -n 's/.*"perplexity": \([0-9.]*\).*/\1/p' "$tmp/out")
awk -v a="$trained" -v b="$untrained" 'BEGIN { exit !(a < b / 2) }' || fail "training did not help: $trained vs $untrained"

# Broken model folders: one error line, exit 2.
expect_rc 2 "$bin/dz-compress" eval --model "$tmp/nowhere" --text "$tmp/base.txt" --threads 1
grep -q "^dz-compress: error: .*config.json" "$tmp/err" || fail "missing model message: $(cat "$tmp/err")"
cp -r "$tmp/m0" "$tmp/broken"
head -c 5000 "$tmp/m0/model.safetensors" > "$tmp/broken/model.safetensors"
expect_rc 2 "$bin/dz-compress" eval --model "$tmp/broken" --text "$tmp/base.txt" --threads 1
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "corrupt weights: expected one error line: $(cat "$tmp/err")"
grep -q "^dz-compress: error: .*model.safetensors" "$tmp/err" || fail "corrupt weights message: $(cat "$tmp/err")"

if [ -n "$python" ]; then
  "$python" - "$tmp/run" "$tmp/base.txt" <<'PY' || fail "transformers could not use the trained folder"
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, text_file = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder).eval()
text = open(text_file).read().splitlines()[0]
ids = tok(text, return_tensors="pt").input_ids
assert ids[0, 0].item() == 1 and ids.shape[1] == len(text.encode()) + 1, ids
assert tok.decode(ids[0], skip_special_tokens=True) == text
with torch.no_grad():
    loss = model(ids, labels=ids).loss.item()
assert loss < 4.5, loss  # trained: below the untrained log(260) = 5.56
print("transformers loads the folder; loss", round(loss, 3))
PY
fi
echo "model tools ok"
