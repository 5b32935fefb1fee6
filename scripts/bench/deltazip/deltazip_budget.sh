#!/usr/bin/env bash
# DeltaZip under a size budget: quality against the whole file's ratio to the
# fp16 model, with `--target-ratio` (forms chosen per layer) beside one form
# for every layer (grids: minmax, lloyd codebooks, ternary; 1 bit: sign).
#   scripts/bench/deltazip/deltazip_budget.sh BASE TARGET CALIB_TEXT METRIC RATIO...
# METRIC is `copy` (exact-match accuracy on 200 copy examples: the demo's copy
# fine-tune) or a held-out text file (the mean NLL gap, nats per token, of
# the reconstruction against the fine-tune, and the share of the fine-tune's
# gain over the base kept). Example on the demo's models:
#   scripts/bench/deltazip/deltazip_budget.sh build/demo/models/base build/demo/models/ft-copy \
#     build/demo/models/copy.txt copy 4 5 6 7 8 10
# BUDGETS_ONLY=1 leaves out the rows of one form for every layer.
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/build/bin
base=$1 target=$2 calib=$3 metric=$4
shift 4
ratios=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

score() {  # score MODEL -> accuracy % or mean NLL
  if [ "$metric" = copy ]; then
    "$bin/dz-compress" -q eval --model "$1" --task copy --samples 200 --json --threads 1 |
      sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' | awk '{ printf "%.1f", $1 * 100 }'
  else
    "$bin/dz-compress" -q eval --model "$1" --text "$metric" --json --threads 1 |
      sed -n 's/.*"mean_nll": \([0-9.]*\).*/\1/p'
  fi
}
ft_score=$(score "$target") base_score=$(score "$base")
if [ "$metric" = copy ]; then
  echo "copy accuracy: base $base_score %, fine-tune $ft_score %"
  header="acc %"
else
  echo "held-out NLL: base $base_score, fine-tune $ft_score (gain $(awk -v b="$base_score" -v f="$ft_score" 'BEGIN { printf "%.4f", b - f }'))"
  header="NLL gap  gain kept"
fi
row() {  # row LABEL FILE
  "$bin/dz-compress" -q decompress "$2" --base "$base" -o "$tmp/rec" --force
  local s ratio
  s=$(score "$tmp/rec")
  ratio=$("$bin/dz-compress" inspect "$2" --json | sed -n 's/.*"ratio_vs_fp16_model": \([0-9.]*\).*/\1/p' | tail -n 1)
  if [ "$metric" = copy ]; then
    printf '%-28s %8.2fx %10s\n' "$1" "$ratio" "$s"
  else
    awk -v l="$1" -v r="$ratio" -v s="$s" -v f="$ft_score" -v b="$base_score" \
      'BEGIN { printf "%-28s %8.2fx %10.4f %8.1f%%\n", l, r, s - f, 100 * (b - s) / (b - f) }'
  fi
}
printf '%-28s %9s %10s\n' "form" "file x" "$header"
for setting in "4 2:4 minmax" "2 none minmax" "2 2:4 minmax" "2 2:4 lloyd" "2 none ternary" "1 none minmax" \
  "1 none lloyd"; do
  [ "${BUDGETS_ONLY:-0}" = 1 ] && break
  set -- $setting
  "$bin/dz-compress" -q compress --base "$base" --target "$target" -o "$tmp/u.h5" --bits "$1" --sparsity "$2" \
    --grid "$3" --calib "$calib" --threads 1 --force >/dev/null
  row "$1-bit $2 $3" "$tmp/u.h5"
done
for ratio in "${ratios[@]}"; do
  "$bin/dz-compress" -q compress --base "$base" --target "$target" -o "$tmp/b.h5" --force --target-ratio "$ratio" \
    --calib "$calib" --threads 1 --json >"$tmp/b.json" || { echo "--target-ratio $ratio: refused (above)"; continue; }
  row "--target-ratio $ratio" "$tmp/b.h5"
done
echo "(one thread; each --target-ratio row measures fourteen forms per layer, then compresses in the chosen ones)"
