#!/usr/bin/env bash
# DeltaZip serving: delta mode against swap mode (the baseline) and full mode
# (the upper bound) on the same arrivals, plus the SBMM kernel against dense
# GEMMs, a variant's prefill product against one dense GEMM, and one decode
# step of delta mode against full mode at the same batch.
#
# Models: the 100m preset (101 M parameters) as base and 16 variants, each
# fine-tuned briefly (STEPS steps) on its own synthetic corpus and compressed
# with OBS at 2:4, odd ones at 4 bits and even ones at 2 bits. Built once
# under MODELS_DIR (about 15 minutes on 2 cores; 420 MB per delta set, the
# fine-tuned folders are deleted after compression).
#
#   scripts/bench/deltazip/dz_serve.sh [MODELS_DIR]     default: build/bench-dz-serve
#   RATES8="1 2 4 8" RATES16="8" DURATION=30 MAX_TOKENS=16 THREADS=1 STEPS=2 CAP=-1 MAX_BATCH=32
#   (an empty RATES8 or RATES16 skips those runs: RATES8="" serves 16 variants only)
#   (CAP: --max-variants-per-batch of the delta and full servers, -1 = the server's default, 0 = no limit; MAX_BATCH: --max-batch of every server)
#   MODES="delta" SKIP_KERNELS=1 SKIP_DECODE=1   rerun some modes only (their earlier results are replaced;
#                                                SKIP_KERNELS skips the CPU kernel benchmarks, SKIP_DECODE the decode step)
#   VARIANTS=8                     make and serve 8 variants only (no 16-variant runs)
#   FORM=rank:16                   compress every variant to low rank (--rank 16, 4-bit factors) instead of
#                                  2:4 (use another MODELS_DIR: variants already made are kept as they are)
#   PARALLEL=2                     variants made at once (one thread each)
#   DEVICE=cuda BIN=build-gpu/bin  fine-tune, compress, time the decode step and serve on a GPU
#                                  (scripts/gpu-check.sh)
# Results (JSON lines) in MODELS_DIR/results; a summary table on stdout and
# MODELS_DIR/results/curves.png.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
models=${1:-$root/build/bench-dz-serve}
bin=${BIN:-$root/build/bin}
rates8=${RATES8-"1 2 4 8"} rates16=${RATES16-"8"} duration=${DURATION:-30} cap=${CAP:--1} max_batch=${MAX_BATCH:-32}
max_tokens=${MAX_TOKENS:-16} threads=${THREADS:-1} steps=${STEPS:-2} device=${DEVICE:-cpu} count=${VARIANTS:-16}
[ "$count" = 8 ] || [ "$count" = 16 ] || { echo "VARIANTS must be 8 or 16" >&2; exit 2; }
[ "$count" = 16 ] || rates16=""
form=${FORM:-2:4}
[ "$form" = 2:4 ] || [[ "$form" =~ ^rank:[1-9][0-9]*$ ]] || { echo "FORM must be 2:4 or rank:R" >&2; exit 2; }
python=${FLEET_PYTHON:-/usr/bin/python3}
results=$models/results
mkdir -p "$models/deltas" "$results"
log() { echo "[dz_serve.sh $(date +%H:%M:%S)] $*" >&2; }

# --- models ---------------------------------------------------------------
[ -f "$models/base/config.json" ] || "$bin/sailor-run" -q init --preset 100m --seed 1 -o "$models/base"
tasks=(base copy reverse sort add)
make_variant() {  # make_variant I
  local i=$1 name
  name=$(printf 'ft%02d' "$i")
  [ -f "$models/deltas/$name.h5" ] && return 0
  local task=${tasks[$((i % 5))]} bits=$(( i % 2 == 1 ? 4 : 2 )) shape
  if [ "$form" = 2:4 ]; then shape=(--bits "$bits" --sparsity 2:4); else shape=(--rank "${form#rank:}" --bits 4); fi
  "$bin/sailor-run" -q make-corpus --task "$task" --lines 2000 --seed "$i" -o "$models/$name.txt"
  "$bin/sailor-run" -q train --model "$models/base" --data "$models/$name.txt" -o "$models/$name" --steps "$steps" \
    --batch-size 2 --seq-len 64 --lr 1e-4 --threads 1 --device "$device" --force >/dev/null
  "$bin/dz-compress" -q compress --base "$models/base" --target "$models/$name" -o "$models/deltas/$name.h5" \
    "${shape[@]}" --calib "$models/$name.txt" --calib-samples 16 --seq-len 64 --threads 1 \
    --device "$device" >/dev/null
  rm -rf "${models:?}/$name" "$models/$name.txt"
  log "variant $name: $task corpus, ${shape[*]}"
}
parallel=${PARALLEL:-2}
for first in $(seq 1 "$parallel" "$count"); do  # PARALLEL at a time, one thread each
  pids=()
  for i in $(seq "$first" $((first + parallel - 1))); do
    [ "$i" -le "$count" ] || break
    make_variant "$i" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done  # a failed variant stops the script
done
for n in 8 16; do
  [ "$n" -le "$count" ] || continue
  rm -rf "$models/d$n" && mkdir -p "$models/d$n"
  for i in $(seq 1 "$n"); do ln -s "../deltas/$(printf 'ft%02d' "$i").h5" "$models/d$n/"; done
done

# --- kernels ----------------------------------------------------------------
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
log "SBMM against dense GEMMs"
"$bin/bench_dz_serve" sbmm "$threads" 5 > "$results/sbmm.jsonl"
log "a variant's prefill product against one dense GEMM"
"$bin/bench_dz_serve" merged "$threads" 7 > "$results/merged.jsonl"
log "weights streamed from memory, the kernels' prefetching on and off"
"$bin/bench_dz_serve" streamed "$threads" 3 > "$results/streamed.jsonl"
fi
if [ "${SKIP_DECODE:-0}" != 1 ]; then
log "one decode step on $device: delta mode against full mode"
: > "$results/decode.jsonl"
for batch in 8 16 32; do
  "$bin/bench_dz_serve" decode "$models/base" "$batch" "$threads" 3 "$device" "$models"/d8/*.h5 >> "$results/decode.jsonl"
done
fi

# --- servers ----------------------------------------------------------------
serve_mode() {  # serve_mode N MODE RATES...
  local n=$1 mode=$2
  shift 2
  local port_file=$results/port log_file=$results/server_${n}_${mode}.log
  rm -f "$port_file"
  "$bin/dz-serve" serve --base "$models/base" --base-name base --delta-dir "$models/d$n" --mode "$mode" \
    --max-batch "$max_batch" --max-context 256 --max-variants-per-batch "$cap" --threads "$threads" --device "$device" --port 0 \
    --port-file "$port_file" > "$log_file" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do [ -f "$port_file" ] && break; sleep 0.5; done
  [ -f "$port_file" ] || { cat "$log_file" >&2; kill "$pid"; return 1; }
  local url=http://127.0.0.1:$(cat "$port_file") variants
  variants=$(cd "$models/d$n" && ls *.h5 | sed 's/\.h5$//' | paste -sd, -)
  for rate in "$@"; do
    log "$n variants, $mode mode, $rate requests/s for $duration s"
    "$bin/dz-serve" -q bench --url "$url" --variants "$variants" --rate "$rate" --duration "$duration" \
      --popularity zipf:1.0 --max-tokens "$max_tokens" --seed 7 --timeout 1200 --json > "$results/run.json" || true
    "$python" - "$results/run.json" "$n" "$mode" "$rate" >> "$results/serve.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r.update(variants_count=int(sys.argv[2]), mode=sys.argv[3], rate=float(sys.argv[4]))
print(json.dumps(r))
PY
  done
  curl -s "$url/metrics" | grep -E '^dz_(resident_bytes|full_models_equivalent_bytes|model_swaps_total|delta_loads_total)' |
    sed "s/^/$n $mode /" >> "$results/memory.txt" || log "no memory figures (curl missing?)"
  kill -TERM "$pid"
  wait "$pid" || true
}
modes=${MODES:-delta swap full}
touch "$results/serve.jsonl" "$results/memory.txt"
for mode in $modes; do  # drop earlier results of the modes run now
  grep -v "\"mode\": \"$mode\"" "$results/serve.jsonl" > "$results/keep" || true
  mv "$results/keep" "$results/serve.jsonl"
  grep -v "^[0-9]* $mode " "$results/memory.txt" > "$results/keep" || true
  mv "$results/keep" "$results/memory.txt"
done
if [ -n "$rates8" ]; then for mode in $modes; do serve_mode 8 "$mode" $rates8; done; fi
if [ -n "$rates16" ]; then for mode in $modes; do serve_mode 16 "$mode" $rates16; done; fi

if "$python" -c 'import matplotlib' 2>/dev/null; then
  "$python" "$root/scripts/plot/dz_serve_curves.py" "$results"
else
  log "no matplotlib for $python: results in $results/serve.jsonl, no figure"
  cat "$results/serve.jsonl"
fi
