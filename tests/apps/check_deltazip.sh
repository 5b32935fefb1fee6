#!/usr/bin/env bash
# Usage: check_deltazip.sh BIN_DIR [PYTHON] — dz-compress end to end: train a
# tiny base and a copy-task fine-tune (about two minutes), compress the
# fine-tune at 4-bit 2:4, reconstruct it, and check its task accuracy stays
# within 2 points of the uncompressed fine-tune and far above the base's;
# inspect; h5py + hdf5plugin read the container (with PYTHON); wrong base,
# corrupt container, mismatched shapes and existing outputs.
set -u
bin=$1 python=${2:-}
source "$(dirname "$0")/testlib.sh"

run() { expect_rc 0 "$@"; }
run "$bin/sailor-run" -q init --preset tiny --seed 1 -o "$tmp/init"
run "$bin/sailor-run" -q make-corpus --task base --lines 4000 --seed 7 -o "$tmp/base.txt"
run "$bin/sailor-run" -q make-corpus --task copy --lines 4000 --seed 7 -o "$tmp/copy.txt"
run "$bin/sailor-run" -q train --model "$tmp/init" --data "$tmp/base.txt" -o "$tmp/base" --steps 250 \
  --batch-size 16 --seq-len 128 --lr 3e-3 --warmup 20
run "$bin/sailor-run" -q train --model "$tmp/base" --data "$tmp/copy.txt" -o "$tmp/ft" --steps 700 --batch-size 32 \
  --seq-len 28 --lr 1e-3 --warmup 30 --data-mode lines --loss-after " =" --threads 1

accuracy() {  # accuracy MODEL -> percent of 200 copy examples
  "$bin/dz-compress" -q eval --model "$1" --task copy --samples 200 --json --threads 1 |
    sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' | awk '{ printf "%.1f", $1 * 100 }'
}
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/delta.h5" --bits 4 --sparsity 2:4 \
  --calib "$tmp/copy.txt" --json
grep -q '"weighted_error_rtn"' "$tmp/out" || fail "compress --json"
run "$bin/dz-compress" -q decompress "$tmp/delta.h5" --base "$tmp/base" -o "$tmp/rec"
base_acc=$(accuracy "$tmp/base") ft_acc=$(accuracy "$tmp/ft") rec_acc=$(accuracy "$tmp/rec")
echo "copy accuracy: base $base_acc %, fine-tune $ft_acc %, reconstructed from 4-bit 2:4 delta $rec_acc %"
awk -v f="$ft_acc" -v r="$rec_acc" -v b="$base_acc" 'BEGIN { exit !(f >= 80 && r >= f - 2 && r > b + 50) }' ||
  fail "accuracy: base $base_acc, fine-tune $ft_acc, reconstructed $rec_acc"

run "$bin/dz-compress" -q compare --base "$tmp/base" --target "$tmp/ft" --reconstructed "$tmp/rec" \
  --text "$tmp/base.txt" --task copy --samples 20 --threads 1
grep -q "^reconstructed  *[0-9.]*  *[0-9.]*$" "$tmp/out" || fail "compare table: $(cat "$tmp/out")"

run "$bin/dz-compress" inspect "$tmp/delta.h5"
grep -q "^linear layers: [0-9.]* bits/weight" "$tmp/out" || fail "inspect: $(cat "$tmp/out")"
run "$bin/dz-compress" inspect "$tmp/delta.h5" --json
grep -q '"ratio_vs_fp16_delta"' "$tmp/out" || fail "inspect --json"

if [ -n "$python" ]; then
  "$python" - "$tmp/delta.h5" <<'PY' || fail "h5py could not read the container"
import sys, h5py, hdf5plugin  # noqa: F401 (registers the zstd filter)
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format"] == "gpufleet-deltazip", dict(f.attrs)
    codes = f["linear/model.layers.0.self_attn.q_proj.weight/codes"]
    assert codes.attrs["bits"] == 4 and codes.attrs["sparsity"] == "2:4"
    assert list(codes.attrs["shape"]) == [128, 128]
    assert codes[:].size == 128 * 64 * 4 // 8  # half the weights kept, 4 bits each
    assert f["dense/model.embed_tokens.weight"].shape == (260, 128)
print("h5py + hdf5plugin read the container")
PY
fi

# --dense-policy full stores the fine-tuned embeddings and norms as they are:
# the reconstruction's copies are bit-identical to the fine-tune's.
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/full.h5" --bits 8 --sparsity none \
  --dense-policy full --method rtn
run "$bin/dz-compress" -q decompress "$tmp/full.h5" --base "$tmp/base" -o "$tmp/rec-full"
if [ -n "$python" ]; then
  "$python" - "$tmp/ft" "$tmp/rec-full" <<'PY' || fail "dense-policy full did not keep the dense tensors"
import sys
from safetensors.numpy import load_file
ft, rec = (load_file(d + "/model.safetensors") for d in sys.argv[1:3])
for name in ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"):
    assert (ft[name] == rec[name]).all(), name
# 8-bit deltas of the linear layers come back close, not equal.
d = abs(ft["model.layers.1.mlp.up_proj.weight"] - rec["model.layers.1.mlp.up_proj.weight"]).max()
assert 0 < d < 1e-3, d
PY
fi

# A different base (same architecture, other weights) is refused; the output is untouched.
run "$bin/sailor-run" -q init --preset tiny --seed 2 -o "$tmp/other"
mkdir -p "$tmp/keep" && echo precious > "$tmp/keep/file"
expect_rc 2 "$bin/dz-compress" decompress "$tmp/delta.h5" --base "$tmp/other" -o "$tmp/keep" --force
grep -q "was made for a base model with identity .*refusing to apply it" "$tmp/err" || fail "wrong base: $(cat "$tmp/err")"
[ "$(cat "$tmp/keep/file")" = precious ] || fail "refused decompress touched the output"
# Existing outputs need --force.
expect_rc 2 "$bin/dz-compress" decompress "$tmp/delta.h5" --base "$tmp/base" -o "$tmp/keep"
cp "$tmp/delta.h5" "$tmp/delta.keep"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/delta.h5"
cmp -s "$tmp/delta.h5" "$tmp/delta.keep" || fail "refused compress touched the delta"
# Mismatched shapes.
run "$bin/sailor-run" -q init --preset small -o "$tmp/small"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/small" -o "$tmp/bad.h5"
grep -q "base and target differ in hidden_size: 128 vs 384" "$tmp/err" || fail "shape message: $(cat "$tmp/err")"
[ ! -e "$tmp/bad.h5" ] || fail "failed compress left a file"
# A corrupt container: one error line, exit 2.
head -c 20000 "$tmp/delta.h5" > "$tmp/corrupt.h5"
expect_rc 2 "$bin/dz-compress" inspect "$tmp/corrupt.h5"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "corrupt container: expected one error line: $(cat "$tmp/err")"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/x.h5" --bits 5
echo "deltazip ok"
