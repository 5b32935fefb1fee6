#!/usr/bin/env bash
# On a GPU: a statically linked CUDA runtime program under orion-run exec
# (its launches reach the scheduler through cuGetProcAddress, its result
# stays correct) and under orion-profile capture (CUPTI records -> profile).
# Skips (77) without a GPU.
set -uo pipefail
bin=$1
app=$2
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no GPU"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$app" 4 8 >"$tmp/alone.txt" 2>&1
code=$?
[ "$code" = 77 ] && { cat "$tmp/alone.txt"; exit 77; }
[ "$code" = 0 ] || { echo "FAIL: the program alone: $(cat "$tmp/alone.txt")"; exit 1; }

"$bin/orion-run" exec --policy orion --hp "$app 10 8" --be "$app 20 8" --wait-be --report --json >"$tmp/exec.json" 2>"$tmp/exec.err" ||
  { echo "FAIL: exec: $(tail -n 5 "$tmp/exec.err")"; fail=1; }
cat "$tmp/exec.json"
python3 - "$tmp/exec.json" <<'PY' || fail=1
import json, sys
text = open(sys.argv[1]).read()
rows = json.loads(text[text.index("{", text.index("result correct")):])["rows"]
hp, be = rows
ok = hp["kernels"] >= 80 and hp["requests"] == 10 and be["kernels"] >= 160 and hp["kernels_held"] == 0
print(("ok   " if ok else "FAIL ") + f"static-cudart launches seen through cuGetProcAddress: HP {hp['kernels']} kernels / {hp['requests']} requests, BE {be['kernels']} kernels")
sys.exit(0 if ok else 1)
PY
[ "$(grep -c 'result correct' "$tmp/exec.json")" = 2 ] || { echo "FAIL: results under exec differ"; fail=1; }

"$bin/orion-profile" capture -o "$tmp/profile.csv" --keep-records "$tmp/records.jsonl" -- "$app" 5 8 2>"$tmp/capture.err" ||
  { echo "FAIL: capture: $(tail -n 3 "$tmp/capture.err")"; fail=1; }
cat "$tmp/capture.err"
rows=$(($(wc -l <"$tmp/profile.csv") - 1))
[ "$rows" = 8 ] && grep -q add_one "$tmp/profile.csv" && echo "ok   capture: 8 kernels per marked iteration" ||
  { echo "FAIL: capture wrote $rows kernels"; head -n 3 "$tmp/profile.csv"; fail=1; }
exit $fail
