#!/usr/bin/env bash
# Usage: check_flags_documented.sh BIN_DIR SOURCE_DIR — every long option of
# every program and subcommand built in BIN_DIR (as its --help lists it) is
# named in README.md or docs/*.md, so a flag added without documentation
# fails here.
set -u
bin=$1 src=$2
source "$(dirname "$0")/testlib.sh"
docs=("$src/README.md" "$src"/docs/*.md)
checked=0 missing=()
for program in sailor-plan sailor-run dz-compress dz-serve orion-profile orion-run; do
  [ -x "$bin/$program" ] || continue  # not built in this configuration (no libtorch)
  expect_rc 0 "$bin/$program" --help
  subcommands=$(sed -n '/^Subcommands:/,$p' "$tmp/out" | awk 'NR > 1 && NF { print $1 }')
  for sub in "" $subcommands; do
    expect_rc 0 "$bin/$program" $sub --help
    # Option lines of CLI11's help: "  -w,--workload TEXT ..." or "  --seed UINT ...".
    for flag in $(grep -oE '^ +(-[A-Za-z],)?--[a-z0-9][a-z0-9-]*' "$tmp/out" | sed 's/.*,//; s/^ *//' | sort -u); do
      [ "$flag" = --help ] && continue
      checked=$((checked + 1))
      grep -qE -- "${flag}([^a-z0-9-]|\$)" "${docs[@]}" || missing+=("$program${sub:+ $sub} $flag")
    done
  done
done
[ "$checked" -gt 20 ] || fail "read only $checked options from the programs' --help: is the help format still parsed?"
[ ${#missing[@]} -eq 0 ] || fail "options not named in README.md or docs/: ${missing[*]}"
echo "ok: $checked options, each named in README.md or docs/"
