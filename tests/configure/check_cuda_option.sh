#!/usr/bin/env bash
# Usage: check_cuda_option.sh SOURCE_DIR — WITH_CUDA without a CUDA toolkit
# in sight: ON is a configure error naming the problem, AUTO configures the
# CPU build (CUDA targets left out), and the generated config.h says so.
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# A PATH without /usr/local/cuda/bin hides nvcc, as on a machine without the toolkit.
hide_cuda=(env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}")
common=(-DWITH_TORCH=OFF -DBUILD_TESTING=OFF -DFLEET_CCACHE=OFF)

"${hide_cuda[@]}" cmake -S "$src" -B "$tmp/on" -DWITH_CUDA=ON "${common[@]}" >"$tmp/on.log" 2>&1 && fail "WITH_CUDA=ON configured without nvcc"
grep -q "WITH_CUDA=ON but no CUDA compiler (nvcc) was found" "$tmp/on.log" || fail "no clear message: $(tail -5 "$tmp/on.log")"

"${hide_cuda[@]}" cmake -S "$src" -B "$tmp/auto" -DWITH_CUDA=AUTO "${common[@]}" >"$tmp/auto.log" 2>&1 || fail "AUTO failed: $(tail -5 "$tmp/auto.log")"
grep -q "#define FLEET_WITH_CUDA 0" "$tmp/auto/generated/fleet/config.h" || fail "config.h does not record CUDA off"
grep -q "fleet_devices_cuda" "$tmp/auto/build.ninja" "$tmp/auto/Makefile" 2>/dev/null && fail "CUDA target generated without CUDA"

"${hide_cuda[@]}" cmake -S "$src" -B "$tmp/bad" -DWITH_CUDA=MAYBE "${common[@]}" >"$tmp/bad.log" 2>&1 && fail "WITH_CUDA=MAYBE accepted"
grep -q "WITH_CUDA must be AUTO, ON or OFF" "$tmp/bad.log" || fail "bad value message"
echo "ok: WITH_CUDA option"
