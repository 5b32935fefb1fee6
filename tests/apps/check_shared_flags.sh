#!/usr/bin/env bash
# Usage: check_shared_flags.sh BINARY NAME — the flags and exit codes every program shares.
set -u
bin=$1 name=$2
fail() { echo "FAIL: $name: $*"; exit 1; }

out=$("$bin" --help 2>&1); rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
for flag in --help --version --verbose --quiet --log-level; do
  grep -q -- "$flag" <<<"$out" || fail "--help does not list $flag"
done

out=$("$bin" --version 2>&1); rc=$?
[ $rc -eq 0 ] || fail "--version exited $rc"
head -n1 <<<"$out" | grep -Eq "^$name \(gpufleet\) [0-9]+\.[0-9]+\.[0-9]+$" || fail "--version first line: $(head -n1 <<<"$out")"
grep -q "^build: " <<<"$out" || fail "--version has no build line"
grep -q "^GPUs: " <<<"$out" || fail "--version has no GPUs line"

err=$("$bin" --no-such-flag 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "unknown flag exited $rc, expected 2"
grep -q "^$name: error: " <<<"$err" || fail "unknown flag error line: $err"

err=$("$bin" --log-level shouting 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "bad --log-level exited $rc, expected 2"
grep -q "^$name: error: unknown log level 'shouting'" <<<"$err" || fail "bad level message: $err"

err=$(GPUFLEET_LOG_LEVEL=bogus "$bin" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "bad GPUFLEET_LOG_LEVEL exited $rc, expected 2"
grep -q "GPUFLEET_LOG_LEVEL" <<<"$err" || fail "bad environment level not named: $err"

err=$(GPUFLEET_CPU_ISA=sse9 "$bin" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "bad GPUFLEET_CPU_ISA exited $rc, expected 2"
grep -q "^$name: error: GPUFLEET_CPU_ISA must be portable, avx2 or avx512, not 'sse9'" <<<"$err" ||
  fail "bad GPUFLEET_CPU_ISA not named: $err"

"$bin" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "no subcommand exited $rc, expected 2"
echo "ok: $name"
