#!/usr/bin/env bash
# Usage: check_deltazip.sh BIN_DIR [PYTHON] — dz-compress end to end: train a
# tiny base and a copy-task fine-tune (2 to 12 minutes by CPU, one thread each),
# compress the fine-tune with OBS and with round-to-nearest, reconstruct
# both, and check what the method promises on any CPU: at 4-bit 2:4, several
# times less Hessian-weighted error; at 2 bits, the OBS reconstruction keeps
# the task (within a margin of the fine-tune) and far better than
# round-to-nearest; inspect; h5py + hdf5plugin read the container (with
# PYTHON); wrong base, corrupt container, mismatched shapes and existing outputs.
# Every figure is from --threads 1 runs, but the assertions leave room for
# the CPU's own SIMD kernels (AMD and Intel sum in different orders).
set -u
bin=$1 python=${2:-}
source "$(dirname "$0")/testlib.sh"

run() { expect_rc 0 "$@"; }
run "$bin/sailor-run" -q init --preset tiny --seed 1 -o "$tmp/init"
run "$bin/sailor-run" -q make-corpus --task base --lines 4000 --seed 7 -o "$tmp/base.txt"
run "$bin/sailor-run" -q make-corpus --task copy --lines 4000 --seed 7 -o "$tmp/copy.txt"
run "$bin/sailor-run" -q train --model "$tmp/init" --data "$tmp/base.txt" -o "$tmp/base" --steps 250 \
  --batch-size 16 --seq-len 128 --lr 3e-3 --warmup 20 --threads 1
# How well a 4-bit 2:4 delta keeps this tiny fine-tune's exact-match accuracy
# varies with the fine-tune itself and with the CPU (OBS kept 97 %, 79 % and
# 0 % of fine-tunes seeded 1, 0 and 2 on an AMD machine, 43 % of seed 1's on
# an Intel one): half the weights pruned in a fixed pattern is too much for
# a model this small to keep an exact-match task reliably. Accuracy is
# checked at 2 bits without pruning instead (OBS 100 %, round-to-nearest
# 17 % on the Intel machine), where the method's margin is wide.
run "$bin/sailor-run" -q train --model "$tmp/base" --data "$tmp/copy.txt" -o "$tmp/ft" --steps 1500 --batch-size 32 \
  --seq-len 28 --lr 1e-3 --warmup 30 --data-mode lines --loss-after " =" --seed 1 --threads 1

accuracy() {  # accuracy MODEL -> percent of 200 copy examples
  "$bin/dz-compress" -q eval --model "$1" --task copy --samples 200 --json --threads 1 |
    sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' | awk '{ printf "%.1f", $1 * 100 }'
}
json_number() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2" | head -n 1; }
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/delta.h5" --bits 4 --sparsity 2:4 \
  --calib "$tmp/copy.txt" --threads 1 --json
grep -q '"weighted_error_rtn"' "$tmp/out" || fail "compress --json"
# The default calibration: two tokens per input of the widest layer (tiny:
# 384 MLP inputs), at least 8 sequences: 8 of 128 tokens, 24 of 32.
grep -q '"calib_samples": 8,' "$tmp/out" || fail "default calibration at --seq-len 128: $(grep calib_samples "$tmp/out")"
obs_error=$(json_number weighted_error "$tmp/out") rtn_error=$(json_number weighted_error_rtn "$tmp/out")
run "$bin/dz-compress" -q decompress "$tmp/delta.h5" --base "$tmp/base" -o "$tmp/rec"
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/rtn.h5" --bits 4 --sparsity 2:4 \
  --method rtn --threads 1 --json
# Round-to-nearest runs no calibration: no Hessians, so no weighted error.
grep -q '"weighted_error": null' "$tmp/out" || fail "rtn compress --json: $(cat "$tmp/out")"
run "$bin/dz-compress" -q decompress "$tmp/rtn.h5" --base "$tmp/base" -o "$tmp/rec-rtn"
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/short.h5" --bits 4 --seq-len 32 \
  --calib "$tmp/copy.txt" --threads 1 --json
grep -q '"calib_samples": 24,' "$tmp/out" || fail "default calibration at --seq-len 32: $(grep calib_samples "$tmp/out")"
for method in obs rtn; do
  run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/2bit-$method.h5" --bits 2 \
    --sparsity none --method "$method" --calib "$tmp/copy.txt" --threads 1
  run "$bin/dz-compress" -q decompress "$tmp/2bit-$method.h5" --base "$tmp/base" -o "$tmp/rec-2bit-$method"
done
base_acc=$(accuracy "$tmp/base") ft_acc=$(accuracy "$tmp/ft") rec_acc=$(accuracy "$tmp/rec")
rtn_acc=$(accuracy "$tmp/rec-rtn") rec2_acc=$(accuracy "$tmp/rec-2bit-obs") rtn2_acc=$(accuracy "$tmp/rec-2bit-rtn")
echo "copy accuracy: base $base_acc %, fine-tune $ft_acc %; from the 2-bit delta: OBS $rec2_acc %," \
  "round-to-nearest $rtn2_acc %; from the 4-bit 2:4 delta (reported, not checked): OBS $rec_acc %," \
  "round-to-nearest $rtn_acc %; Hessian-weighted error at 4-bit 2:4: OBS $obs_error, round-to-nearest $rtn_error"
awk -v f="$ft_acc" -v b="$base_acc" 'BEGIN { exit !(f >= 80 && b <= 20) }' ||
  fail "training: base $base_acc %, fine-tune $ft_acc % (the fine-tune must learn the task the base cannot do)"
awk -v f="$ft_acc" -v r="$rec2_acc" -v n="$rtn2_acc" 'BEGIN { exit !(r >= f - 15 && r >= n + 25) }' ||
  fail "2-bit OBS reconstruction $rec2_acc % against fine-tune $ft_acc % and round-to-nearest $rtn2_acc %"
awk -v o="$obs_error" -v n="$rtn_error" 'BEGIN { exit !(o > 0 && o * 3 < n) }' ||
  fail "Hessian-weighted error: OBS $obs_error, round-to-nearest $rtn_error"

run "$bin/dz-compress" -q compare --base "$tmp/base" --target "$tmp/ft" --reconstructed "$tmp/rec" \
  --text "$tmp/base.txt" --task copy --samples 20 --threads 1
grep -q "^reconstructed  *[0-9.]*  *[0-9.]*$" "$tmp/out" || fail "compare table: $(cat "$tmp/out")"

run "$bin/dz-compress" inspect "$tmp/delta.h5"
grep -q "^linear layers: [0-9.]* bits/weight" "$tmp/out" || fail "inspect: $(cat "$tmp/out")"
run "$bin/dz-compress" inspect "$tmp/delta.h5" --json
grep -q '"ratio_vs_fp16_delta"' "$tmp/out" || fail "inspect --json"

if [ -n "$python" ]; then
  "$python" - "$tmp/delta.h5" "$tmp/base" "$tmp/ft" "$tmp/rec" <<'PY' || fail "h5py could not read the container"
import sys, h5py, hdf5plugin  # noqa: F401 (registers the zstd filter)
import numpy as np
from safetensors.numpy import load_file
base, ft, rec = (load_file(d + "/model.safetensors") for d in sys.argv[2:5])
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format"] == b"gpufleet-deltazip", dict(f.attrs)  # fixed-length strings read as bytes
    assert f.attrs["version"] == 2
    assert f.id.get_create_plist().get_version()[0] >= 2  # checksummed superblock and metadata
    codes = f["linear/model.layers.0.self_attn.q_proj.weight/codes"]
    assert codes.attrs["bits"] == 4 and codes.attrs["sparsity"] == b"2:4"
    assert list(codes.attrs["shape"]) == [128, 128]
    assert codes[:].size == 128 * 64 * 4 // 8  # half the weights kept, 4 bits each
    # The embedding: its changed rows at 8 bits (the default), decoded here
    # from the layout in docs/formats.md alone.
    g = f["rows/model.embed_tokens.weight"]
    bits = int(g["codes"].attrs["bits"])
    assert bits == 8 and list(g["codes"].attrs["shape"]) == [260, 128]
    rows, scales = g["rows"][:], g["scales"][:].astype(np.float32)
    codes = np.unpackbits(g["codes"][:], bitorder="little").reshape(-1, bits)
    levels = (codes * (1 << np.arange(bits))).sum(axis=1)[: len(rows) * 128].reshape(len(rows), 128)
    decoded = np.zeros((260, 128), np.float32)
    decoded[rows] = scales[:, None] * (levels - (1 << (bits - 1)))
    name = "model.embed_tokens.weight"
    delta = ft[name].astype(np.float32) - base[name].astype(np.float32)
    kept = np.zeros(260, bool)
    kept[rows] = True
    assert np.all(np.diff(rows) > 0) and len(rows) > 0
    assert np.all(np.abs(decoded - delta)[kept] <= scales[:, None] * 0.51 + 1e-7), "a kept row is off by more than half a step"
    top = np.abs(delta).max()
    assert np.all(np.abs(delta[~kept]) < top / 254 + 1e-12), "a row left out had moved"
    # decompress adds the same decoded rows to the base.
    assert np.allclose(rec[name].astype(np.float32), base[name].astype(np.float32) + decoded, atol=1e-6)
print(f"h5py + hdf5plugin read the container; embedding: {len(rows)} of 260 rows kept at {bits} bits")
PY
fi

# The grids beyond the uniform one: a 2-bit Lloyd codebook per group of 32
# columns and 1-bit sign x scale, decoded by numpy from docs/formats.md alone
# and compared with what decompress rebuilds.
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/lloyd.h5" --bits 2 --grid lloyd \
  --sparsity none --group-size 32 --calib "$tmp/copy.txt" --threads 1
run "$bin/dz-compress" -q decompress "$tmp/lloyd.h5" --base "$tmp/base" -o "$tmp/rec-lloyd"
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/sign.h5" --bits 1 --sparsity none \
  --calib "$tmp/copy.txt" --threads 1
run "$bin/dz-compress" -q decompress "$tmp/sign.h5" --base "$tmp/base" -o "$tmp/rec-sign"
run "$bin/dz-compress" inspect "$tmp/lloyd.h5"
grep -q "model.layers.0.mlp.down_proj.weight  *2-bit none" "$tmp/out" || fail "inspect of a codebook form: $(cat "$tmp/out")"
if [ -n "$python" ]; then
  "$python" - "$tmp" <<'PY' || fail "numpy decoding of the codebook and sign forms"
import sys, h5py, hdf5plugin  # noqa: F401
import numpy as np
from safetensors.numpy import load_file
tmp = sys.argv[1]
base = load_file(tmp + "/base/model.safetensors")
name = "model.layers.1.mlp.down_proj.weight"  # [128, 384]
def codes_of(g, bits, count):
    raw = np.unpackbits(g["codes"][:], bitorder="little")[: count * bits].reshape(count, bits)
    return (raw * (1 << np.arange(bits))).sum(axis=1)
with h5py.File(tmp + "/lloyd.h5", "r") as f:
    g = f["linear/" + name]
    assert "scales" not in g and "zeros" not in g
    book = g["codebook"][:].astype(np.float32).reshape(128, 384 // 32, 4)
    assert np.all(np.diff(book, axis=2) >= 0), "levels are not ascending"
    codes = codes_of(g, 2, 128 * 384).reshape(128, 384)
    decoded = np.take_along_axis(book[:, np.arange(384) // 32, :], codes[:, :, None], axis=2)[:, :, 0]
rec = load_file(tmp + "/rec-lloyd/model.safetensors")
assert np.allclose(rec[name], base[name] + decoded, atol=1e-6), "codebook form decoded differently"
with h5py.File(tmp + "/sign.h5", "r") as f:
    g = f["linear/" + name]
    assert g["codes"].attrs["bits"] == 1 and not g["zeros"][:].any()
    scales = g["scales"][:].astype(np.float32)
    codes = codes_of(g, 1, 128 * 384).reshape(128, 384)
    decoded = scales[:, None] * (2 * codes - 1)
rec = load_file(tmp + "/rec-sign/model.safetensors")
assert np.allclose(rec[name], base[name] + decoded, atol=1e-6), "sign form decoded differently"
print("numpy decoded the Lloyd codebook and the 1-bit sign forms as decompress did")
PY
fi

# A size budget instead of knobs: at the bytes of the uniform 2-bit 2:4
# file, the per-layer choice fits and keeps the copy task at least as well
# (measured: 100 % against 85 %, with 2.5x less Hessian-weighted error); a
# budget below what the smallest forms take, or a budget beside --bits, is
# refused and writes nothing.
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/u24.h5" --bits 2 --sparsity 2:4 \
  --calib "$tmp/copy.txt" --threads 1 --json
uniform_bytes=$(json_number bytes "$tmp/out") uniform_error=$(json_number weighted_error "$tmp/out")
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/budget.h5" \
  --max-bytes "$uniform_bytes" --calib "$tmp/copy.txt" --threads 1 --json
budget_bytes=$(json_number bytes "$tmp/out") budget_error=$(json_number weighted_error "$tmp/out")
[ "$(grep -c '"model.layers.[0-9]*\.[a-z_]*\.[a-z_]*_proj.weight": "[1-8]-bit [^"]*"' "$tmp/out")" = 28 ] ||
  fail "the allocation names a form for each of the 28 linear layers: $(cat "$tmp/out")"
[ "$(stat -c %s "$tmp/budget.h5")" = "$budget_bytes" ] && [ "$budget_bytes" -le "$uniform_bytes" ] ||
  fail "budgeted file $budget_bytes bytes against the budget $uniform_bytes"
run "$bin/dz-compress" -q decompress "$tmp/u24.h5" --base "$tmp/base" -o "$tmp/rec-u24"
run "$bin/dz-compress" -q decompress "$tmp/budget.h5" --base "$tmp/base" -o "$tmp/rec-budget"
uniform_acc=$(accuracy "$tmp/rec-u24") budget_acc=$(accuracy "$tmp/rec-budget")
echo "at $uniform_bytes bytes: uniform 2-bit 2:4 accuracy $uniform_acc %, error $uniform_error;" \
  "per-layer forms $budget_acc %, error $budget_error ($budget_bytes bytes)"
awk -v b="$budget_acc" -v u="$uniform_acc" -v f="$ft_acc" 'BEGIN { exit !(b >= u - 5 && b >= f - 15) }' ||
  fail "copy accuracy with the budget $budget_acc %, uniform 2-bit 2:4 $uniform_acc %, fine-tune $ft_acc %"
awk -v b="$budget_error" -v u="$uniform_error" 'BEGIN { exit !(b < u) }' ||
  fail "weighted error with the budget $budget_error, uniform 2-bit 2:4 $uniform_error"
run "$bin/dz-compress" inspect "$tmp/budget.h5"
grep -q '"budget":{"bytes":'"$uniform_bytes" "$tmp/out" || fail "inspect shows the budget: $(head -n 2 "$tmp/out")"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/nobudget.h5" --max-bytes 20000 \
  --threads 1
grep -q "more than the .* bytes the budget leaves them\|alone take .* bytes" "$tmp/err" || fail "impossible budget: $(cat "$tmp/err")"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/nobudget.h5" --target-ratio 8 \
  --bits 2 --threads 1
grep -q "fixes what a size budget chooses" "$tmp/err" || fail "--bits beside --target-ratio: $(cat "$tmp/err")"
[ ! -e "$tmp/nobudget.h5" ] || fail "a refused budget left a file"

# --dense-policy full stores the fine-tuned embeddings and norms as they are:
# the reconstruction's copies are bit-identical to the fine-tune's.
run "$bin/dz-compress" -q compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/full.h5" --bits 8 --sparsity none \
  --dense-policy full --method rtn --threads 1
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
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/delta.h5" --threads 1
cmp -s "$tmp/delta.h5" "$tmp/delta.keep" || fail "refused compress touched the delta"
# Mismatched shapes.
run "$bin/sailor-run" -q init --preset small -o "$tmp/small"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/small" -o "$tmp/bad.h5" --threads 1
grep -q "base and target differ in hidden_size: 128 vs 384" "$tmp/err" || fail "shape message: $(cat "$tmp/err")"
[ ! -e "$tmp/bad.h5" ] || fail "failed compress left a file"
# A corrupt container: one error line, exit 2.
head -c 20000 "$tmp/delta.h5" > "$tmp/corrupt.h5"
expect_rc 2 "$bin/dz-compress" inspect "$tmp/corrupt.h5"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "corrupt container: expected one error line: $(cat "$tmp/err")"
expect_rc 2 "$bin/dz-compress" compress --base "$tmp/base" --target "$tmp/ft" -o "$tmp/x.h5" --bits 5 --threads 1
echo "deltazip ok"
