#!/usr/bin/env bash
# Usage: check_outputs.sh BIN_DIR SOURCE_DIR WITH_TORCH(0|1) — the programs'
# rules for outputs, one class per section, each through the real programs:
#  1. an output that is not a regular file is written into, never replaced
#     (FIFO, device node, /dev/stdout, a symbolic link), and nothing else in
#     the folder changes;
#  2. "out/" is the folder out;
#  3. one writer per output (a second command on the same -o is refused);
#  4. names near NAME_MAX work;
#  5. signals leave no temporaries, and a killed run's are removed by the next;
#  6. a full disk (a file size limit) is one error line, exit 1, nothing left;
#  7. reports that cannot be written to stdout make the exit code 1.
# Waits for states (a lock file, a temporary file), never for fixed times.
set -u
bin=$1 src=$2 torch=$3
source "$(dirname "$0")/testlib.sh"
ex="$src/examples"
opt="$ex/sailor/opt-350" plan="$ex/sailor/plans/opt350_gh200_pp2.json"
work="$tmp/work"
mkdir -p "$work" "$tmp/tmpdir"
export TMPDIR="$tmp/tmpdir"  # where stream outputs keep their temporaries: checked empty at the end

# Every entry with its type; files with their size, time and checksum (a
# FIFO's or a device's times change when they are written into: not compared).
snapshot() {
  (cd "$work" && find . ! -type f -printf '%y %p\n' | sort
   find . -type f -printf '%p %s %T@\n' | sort
   find . -type f -print0 | sort -z | xargs -0 -r md5sum) > "$1"
}
# wait_for PATH-GLOB SECONDS: until something matches (a state, not a time).
wait_for() {
  local pattern=$1 limit=$2 i
  for ((i = 0; i < limit * 20; i++)); do
    compgen -G "$pattern" >/dev/null && return 0
    sleep 0.05
  done
  return 1
}
one_error_line() {  # one_error_line CONTEXT PATTERN: stderr is exactly one "tool: error: ...PATTERN" line
  [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "$1: expected one error line, got: $(cat "$tmp/err")"
  grep -Eq "^[a-z-]+: error: .*($2)" "$tmp/err" || fail "$1: '$(cat "$tmp/err")' lacks /$2/"
}

# --- 1. Streams are written into; links are followed -------------------------
# Commands that write one file, without libtorch: OUT is replaced by the output.
commands=(
  "$bin/sailor-plan export -i $opt -p $plan -o OUT"
  "$bin/sailor-plan simulate -i $opt -p $plan --trace OUT"
  "$bin/orion-profile import-ncu $ex/orion/ncu_sample_raw.csv --device a100-40 -o OUT"
  "$bin/orion-run simulate -w $ex/orion/rnet50_inf_train.json -p orion --requests 20 --csv OUT"
)
[ "$torch" = 1 ] && commands+=("$bin/sailor-run make-corpus --task copy --lines 20 -o OUT")
mkfifo "$work/fifo"
echo "keep" > "$work/real.txt"
ln -s real.txt "$work/link.txt"
device=""
if [ "$(id -u)" = 0 ] && mknod "$work/null" c 1 3 2>/dev/null; then device=null; fi  # a /dev/null of our own
for cmd in "${commands[@]}"; do
  # A FIFO: a reader gets the whole output, the FIFO stays a FIFO.
  snapshot "$tmp/before"
  cat "$work/fifo" > "$tmp/from-fifo" &
  reader=$!
  ${cmd//OUT/$work/fifo} >/dev/null 2>"$tmp/err" || fail "$cmd into a FIFO: $(cat "$tmp/err")"
  wait $reader
  [ -s "$tmp/from-fifo" ] || fail "$cmd: nothing came through the FIFO"
  [ -p "$work/fifo" ] || fail "$cmd replaced the FIFO"
  snapshot "$tmp/after"
  cmp -s "$tmp/before" "$tmp/after" || fail "$cmd into a FIFO changed the folder: $(diff "$tmp/before" "$tmp/after")"
  # A device node: written into, still a device.
  if [ -n "$device" ]; then
    ${cmd//OUT/$work/$device} >/dev/null 2>"$tmp/err" || fail "$cmd into a device: $(cat "$tmp/err")"
    [ -c "$work/$device" ] || fail "$cmd replaced the device node"
    snapshot "$tmp/after"
    cmp -s "$tmp/before" "$tmp/after" || fail "$cmd into a device changed the folder: $(diff "$tmp/before" "$tmp/after")"
  fi
  # /dev/stdout: the output arrives on stdout, the report moves to stderr.
  ${cmd//OUT//dev/stdout} >"$tmp/from-stdout" 2>"$tmp/err" || fail "$cmd to /dev/stdout: $(cat "$tmp/err")"
  cmp -s "$tmp/from-stdout" "$tmp/from-fifo" || fail "$cmd: /dev/stdout and the FIFO got different bytes"
  # A link: the file behind it is replaced, the link stays.
  ${cmd//OUT/$work/link.txt} >/dev/null 2>"$tmp/err" || fail "$cmd into a link: $(cat "$tmp/err")"
  [ -L "$work/link.txt" ] || fail "$cmd replaced the link with a file"
  cmp -s "$work/real.txt" "$tmp/from-fifo" || fail "$cmd did not write through the link"
  echo "keep" > "$work/real.txt"
done
# In a private mount namespace (root only), the real name /dev/null too.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
   unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private bash -c '
    set -e
    mount -t tmpfs tmpfs /dev
    mknod /dev/null c 1 3
    chmod 666 /dev/null
    "$1" export -i "$2" -p "$3" -o /dev/null
    [ -c /dev/null ] || { echo "/dev/null is no longer a device"; exit 1; }' _ "$bin/sailor-plan" "$opt" "$plan" \
    >"$tmp/out" 2>&1 || fail "-o /dev/null: $(cat "$tmp/out")"
fi
# A socket is refused.
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$work/sock" 2>/dev/null &&
  { expect_rc 2 "$bin/sailor-plan" export -i "$opt" -p "$plan" -o "$work/sock"; one_error_line "-o socket" "socket"; }
rm -f "$work/sock"

# --- 7. Standard output that cannot be written --------------------------------
stdout_commands=(
  "$bin/sailor-plan -q simulate -i $opt -p $plan --json"
  "$bin/sailor-plan --help"
  "$bin/orion-run --version"
  "$bin/orion-profile -q summarize $ex/orion/profiles/resnet50_4_fwd.csv"
  "$bin/orion-run -q simulate -w $ex/orion/rnet50_inf_train.json -p orion --requests 20 --json"
  "$bin/sailor-plan -q export -i $opt -p $plan -o -"
)
[ "$torch" = 1 ] && stdout_commands+=("$bin/dz-compress --help" "$bin/sailor-run --version" "$bin/dz-serve --help")
for cmd in "${stdout_commands[@]}"; do
  $cmd >/dev/full 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] || fail "$cmd >/dev/full exited $rc, expected 1"
  one_error_line "$cmd >/dev/full" "No space left on device"
done

# Nothing of the above stays behind.
[ -z "$(ls -A "$TMPDIR")" ] || fail "temporaries left in TMPDIR: $(ls -A "$TMPDIR")"
leftovers=$(cd "$work" && ls -A | grep -v -E '^(fifo|real.txt|link.txt|null)$')
[ -z "$leftovers" ] || fail "left in the folder: $leftovers"

[ "$torch" = 1 ] || { echo "outputs: stream and stdout rules checked (no libtorch: the rest skipped)"; exit 0; }

# --- 2. "out/" is the folder out ------------------------------------------------
cd "$work"
"$bin/sailor-run" -q init --preset tiny -o base || fail "init"
"$bin/sailor-run" -q init --preset tiny --seed 2 -o tuned || fail "init tuned"
"$bin/sailor-run" -q make-corpus --task base --lines 100 -o corpus.txt || fail "corpus"
mkdir o2 o3 o6
expect_rc 0 "$bin/sailor-run" -q init --preset tiny -o o2/
[ -f o2/config.json ] || fail "init -o o2/ did not write o2"
"$bin/dz-compress" -q compress --base base --target tuned -o d.h5 --method rtn --threads 1 >/dev/null || fail "compress"
expect_rc 0 "$bin/dz-compress" -q decompress --base base d.h5 -o o3/
[ -f o3/model.safetensors ] || fail "decompress -o o3/ did not write o3"
expect_rc 0 "$bin/sailor-run" -q train --model base --data corpus.txt -o o6/ --steps 3 --checkpoint-every 2 --threads 1
grep -q '"step": 3' o6/trainer_state.json || fail "train -o o6/ did not checkpoint in o6"
[ -z "$(ls -A | grep -E '\.tmp-|\.lock$')" ] || fail "temporaries or locks left: $(ls -A)"

# --- 3. One writer per output, 17. SIGTERM checkpoints the step ----------------
"$bin/sailor-run" -q train --model base --data corpus.txt -o busy --steps 100000 --checkpoint-every 100000 \
  --threads 1 >/dev/null 2>"$tmp/first-err" &
first=$!
wait_for ".busy.lock" 60 || fail "the first train never claimed its output"
expect_rc 2 "$bin/sailor-run" -q train --model base --data corpus.txt -o busy --steps 3 --threads 1
one_error_line "a second train on the same -o" "being written by another command \\(process $first\\)"
kill -TERM $first
wait $first
rc=$?
[ $rc -eq 143 ] || fail "train stopped by SIGTERM exited $rc, expected 143: $(cat "$tmp/first-err")"
step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' busy/trainer_state.json) ||
  fail "SIGTERM left no checkpoint: $(cat "$tmp/first-err")"
[ "$step" -ge 1 ] || fail "SIGTERM checkpointed step $step"
grep -q "stopped by SIGTERM after step $step" "$tmp/first-err" || fail "SIGTERM: $(cat "$tmp/first-err")"
[ ! -e .busy.lock ] || fail "the lock file stayed after the run"

# --- 4. Names near NAME_MAX ----------------------------------------------------
long=$(printf 'n%.0s' $(seq 1 240))
expect_rc 0 "$bin/sailor-run" -q train --model base --data corpus.txt -o "$long" --steps 2 --checkpoint-every 1 --threads 1
[ -f "$long/trainer_state.json" ] || fail "train -o <240 characters> wrote nothing"
longer=$(printf 'm%.0s' $(seq 1 250)).h5
expect_rc 0 "$bin/dz-compress" -q compress --base base --target tuned -o "$longer" --method rtn --threads 1
too_long=$(printf 'x%.0s' $(seq 1 256))
expect_rc 2 "$bin/sailor-run" -q train --model base --data corpus.txt -o "$too_long" --steps 2 --threads 1
one_error_line "train -o <256 characters>" "accepts at most 255"

# --- 5. Signals, and what a killed run left --------------------------------------
"$bin/sailor-run" -q init --preset small -o sbase || fail "init small"
"$bin/sailor-run" -q init --preset small --seed 3 -o stuned || fail "init small tuned"
# A background job of a script starts with SIGINT ignored (and a program
# keeps ignoring what it was started ignoring): restore it for the test.
with_sigint() { exec python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
for sig in TERM INT; do
  with_sigint "$bin/dz-compress" -q compress --base sbase --target stuned -o k.h5 --threads 1 >/dev/null 2>&1 &
  pid=$!
  wait_for ".k.h5.tmp-*" 120 || fail "compress never made its temporary file"
  kill -$sig $pid
  wait $pid
  rc=$?
  [ $rc -gt 128 ] || fail "compress stopped by SIG$sig exited $rc"
  [ -z "$(ls -A | grep -E '^\.k\.h5')" ] || fail "SIG$sig left $(ls -A | grep -E '^\.k\.h5')"
done
"$bin/dz-compress" -q compress --base sbase --target stuned -o - --threads 1 >/dev/null 2>&1 &
pid=$!
wait_for "$TMPDIR/gpufleet-output-*" 120 || fail "compress -o - never made its temporary file"
kill -TERM $pid
wait $pid
[ -z "$(ls -A "$TMPDIR")" ] || fail "SIGTERM left $(ls -A "$TMPDIR") in TMPDIR"
# SIGKILL: nothing can clean up; the next run that writes the same output does.
"$bin/dz-compress" -q compress --base sbase --target stuned -o k.h5 --threads 1 >/dev/null 2>&1 &
pid=$!
wait_for ".k.h5.tmp-*" 120 || fail "compress never made its temporary file"
kill -KILL $pid
wait $pid 2>/dev/null
compgen -G ".k.h5.tmp-*" >/dev/null || fail "SIGKILL left no temporary (the test expects one)"
expect_rc 0 "$bin/dz-compress" -q compress --base base --target tuned -o k.h5 --method rtn --threads 1
[ -z "$(ls -A | grep -E '^\.k\.h5')" ] || fail "the next run left $(ls -A | grep -E '^\.k\.h5')"

# --- 6. A full disk ---------------------------------------------------------------
for out in full.h5 -; do
  bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' _ "$bin/dz-compress" -q compress --base sbase --target stuned \
    -o "$out" --threads 1 >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] || fail "compress -o $out onto a full disk exited $rc, expected 1: $(cat "$tmp/err")"
  one_error_line "compress -o $out onto a full disk" "File too large"
  [ -z "$(ls -A | grep -E '^(\.?full)')" ] || fail "a full disk left $(ls -A | grep full)"
  [ -z "$(ls -A "$TMPDIR")" ] || fail "a full disk left $(ls -A "$TMPDIR") in TMPDIR"
done
bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' _ "$bin/sailor-run" -q init --preset small -o full-model \
  >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "init onto a full disk: $(cat "$tmp/err")"
one_error_line "init onto a full disk" "File too large"
[ ! -e full-model ] && [ -z "$(ls -A | grep -E '^\.full-model')" ] || fail "a full disk left $(ls -A | grep full-model)"

echo "outputs: streams, links, 'out/', one writer, long names, signals, stale temporaries, full disks, stdout: all held"
