#!/usr/bin/env bash
# How much calibration OBS needs: the copy fine-tune that scripts/demo.sh
# trains, compressed as a 2-bit 2:4 delta with 2 to 64 calibration sequences
# (and round-to-nearest, none), each reconstruction scored on what it was
# not calibrated on: exact-match accuracy on fresh copy examples, and the
# absolute gap in negative log-likelihood to the fine-tune on held-out base
# text (how faithfully the delta keeps the fine-tune's behaviour beyond its
# task; the fine-tune's loss was on copy answers only, so NLL on copy text
# would reward drifting back to the base), and the seconds per million
# parameters of compress on one thread.
#   scripts/bench/deltazip/deltazip_calibration.sh [MODELS_DIR]    default: build/demo/models
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
models=${1:-$root/build/demo/models}
bin=$root/build/bin
[ -d "$models/ft-copy" ] || { echo "no $models/ft-copy: run scripts/demo.sh first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -f "$models/base-heldout.txt" ] || { echo "no $models/base-heldout.txt: run scripts/demo.sh first" >&2; exit 2; }
printf '%-18s %10s %12s %12s %10s %10s\n' calibration "s/M param" "NLL gap" "H-error" "copy acc" "file x"
for n in rtn 2 4 8 16 32 64; do
  if [ "$n" = rtn ]; then
    args=(--method rtn)
  else
    args=(--calib "$models/copy.txt" --calib-samples "$n")
  fi
  out=$("$bin/dz-compress" -q compress --base "$models/base" --target "$models/ft-copy" -o "$tmp/d.h5" --force \
    --bits 2 --sparsity 2:4 --threads 1 --json "${args[@]}")
  "$bin/dz-compress" -q decompress "$tmp/d.h5" --base "$models/base" -o "$tmp/rec" --force
  cmp=$("$bin/dz-compress" -q compare --base "$models/base" --target "$models/ft-copy" --reconstructed "$tmp/rec" \
    --text "$models/base-heldout.txt" --task copy --samples 200 --seed 5 --threads 1 --json)
  info=$("$bin/dz-compress" inspect "$tmp/d.h5" --json)
  /usr/bin/python3 - "$n" "$out" "$cmp" "$info" <<'PY'
import json, sys
n, out, cmp, info = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
models = {m["label"]: m for m in cmp["models"]}
ft, rec = models["target"], models["reconstructed"]
gap = abs(rec["text"]["mean_nll"] - ft["text"]["mean_nll"])
acc = rec["tasks"][0]["accuracy"]
err = out["weighted_error"]
label = "none (rtn)" if n == "rtn" else f"{n} sequences"
print(f"{label:18s} {out['seconds_per_million_parameters']:10.3f} {gap:12.5f} "
      f"{(f'{err:.2f}' if err is not None else '-'):>12s} {acc * 100:9.1f}% {info['total']['ratio_vs_fp16_model']:9.2f}x")
PY
done
echo "(NLL gap: |reconstruction - fine-tune|, nats per token on held-out base text; H-error: on the run's own"
echo " calibration Hessians, so not comparable across rows; one thread)"
