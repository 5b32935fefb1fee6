#!/usr/bin/env bash
# DeltaZip compression: size against fp16, quality against round-to-nearest at
# equal bits, and time per million parameters, on the tiny base and its copy
# fine-tune that scripts/demo.sh trains (run the demo first).
#   scripts/bench/deltazip/deltazip.sh [MODELS_DIR]    default: build/demo/models
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
models=${1:-$root/build/demo/models}
bin=$root/build/bin
[ -d "$models/ft-copy" ] || { echo "no $models/ft-copy: run scripts/demo.sh first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

acc() { "$bin/dz-compress" -q eval --model "$1" --task copy --samples 200 --json --threads 1 |
  sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' | awk '{ printf "%.1f", $1 * 100 }'; }
echo "copy accuracy: base $(acc "$models/base") %, uncompressed fine-tune $(acc "$models/ft-copy") %"
printf '%-7s %-6s %-7s %12s %12s %14s %10s %9s %10s\n' bits sparse method "linear b/w" "linear x" "file x fp16" "H-error" "acc %" "s/M param"
for setting in "2 2:4" "2 4:8" "3 2:4" "4 2:4" "4 none" "8 none"; do
  set -- $setting
  for method in obs rtn; do
    out=$("$bin/dz-compress" -q compress --base "$models/base" --target "$models/ft-copy" -o "$tmp/d.h5" --force \
      --bits "$1" --sparsity "$2" --method "$method" --calib "$models/copy.txt" --threads 1 --json)
    "$bin/dz-compress" -q decompress "$tmp/d.h5" --base "$models/base" -o "$tmp/rec" --force
    info=$("$bin/dz-compress" inspect "$tmp/d.h5" --json)
    /usr/bin/python3 - "$1" "$2" "$method" "$out" "$info" "$(acc "$tmp/rec")" <<'PY'
import json, sys
bits, sparse, method, out, info, acc = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6]
lin = info["linear"]
error = out["weighted_error"]  # null for round-to-nearest, which runs no calibration
error = f"{error:10.2f}" if error is not None else f"{'-':>10s}"
print(f"{bits:7s} {sparse:6s} {method:7s} {lin['bits_per_weight']:12.3f} {lin['ratio_vs_fp16_delta']:11.2f}x "
      f"{info['total']['ratio_vs_fp16_model']:13.2f}x {error} {acc:>9s} {out['seconds_per_million_parameters']:10.2f}")
PY
  done
done
echo "(linear x: fp16 delta of the linear layers / their stored bytes; file x fp16: fp16 model / whole file;"
echo " H-error: sum over linear layers of tr(E H E^T), OBS only; one thread)"
