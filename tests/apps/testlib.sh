# Shared by the program tests: a temporary folder removed on exit, fail(),
# and expect_rc CODE COMMAND... which runs COMMAND with stdout in $tmp/out and
# stderr in $tmp/err and fails unless it exits with CODE.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() {
  local want=$1
  shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$tmp/err")"
}
