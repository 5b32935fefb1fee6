#!/usr/bin/env bash
# Prefill and decode tokens/s of lib/model against transformers on the same CPU,
# model, batch, lengths and thread count, in the same run: the tiny preset and
# the ~100M-parameter preset (random weights; speed does not depend on them).
#   scripts/bench/model/model_inference.sh [BUILD_DIR]     THREADS=1 (default) or 2
#   DEVICE=cuda scripts/bench/model/model_inference.sh BUILD_DIR   on the GPU, bfloat16 (a CUDA build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-1}
device=${DEVICE:-cpu}
python=${FLEET_PYTHON:-$root/.venv/bin/python}
# A tree from scripts/gpu-prebuild.sh has the programs but nothing to build with.
if [ -f "$build/CMakeCache.txt" ]; then
  cmake --build "$build" -j "${FLEET_JOBS:-2}" --target bench_model_inference sailor-run >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%-6s %-22s %14s %14s %7s %14s %14s %7s\n' model "batch x prompt + new" "prefill ours" "prefill HF" ratio \
  "decode ours" "decode HF" ratio
for preset in tiny 100m; do
  "$build/bin/sailor-run" -q init --preset "$preset" -o "$tmp/$preset"
  for shape in "1 128 32" "8 128 32"; do
    set -- $shape
    ours=$("$build/bin/bench_model_inference" "$tmp/$preset" "$1" "$2" "$3" "$threads" 3 "$device")
    hf=$("$python" "$root/scripts/bench/model/model_inference_hf.py" "$tmp/$preset" "$1" "$2" "$3" "$threads" 3 "$device" 2>/dev/null)
    /usr/bin/python3 - "$preset" "$1 x $2 + $3" "$ours" "$hf" <<'PY'
import json, sys
preset, shape, ours, hf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
p, q = ours["prefill_tokens_per_s"], hf["prefill_tokens_per_s"]
d, e = ours["decode_tokens_per_s"], hf["decode_tokens_per_s"]
print(f"{preset:6s} {shape:22s} {p:12.0f}/s {q:12.0f}/s {p / q:6.2f}x {d:12.0f}/s {e:12.0f}/s {d / e:6.2f}x")
PY
  done
done
echo "(tokens/s, best of 3 after a warm-up; ratio = ours / transformers; $device, $threads thread(s))"
