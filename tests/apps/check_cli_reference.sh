#!/usr/bin/env bash
# Usage: check_cli_reference.sh BIN_DIR SOURCE_DIR — the reference pages in
# docs/cli/ are what scripts/gen_cli_docs.py makes from the programs' --help
# now: a flag added, removed or reworded without regenerating them fails
# here. To regenerate: python3 scripts/gen_cli_docs.py --markdown docs/cli
# build/bin build dz-compress dz-serve orion-profile orion-run sailor-plan sailor-run
set -u
bin=$1 src=$2
source "$(dirname "$0")/testlib.sh"
programs=(dz-compress dz-serve orion-profile orion-run sailor-plan sailor-run)
expect_rc 0 python3 "$src/scripts/gen_cli_docs.py" --markdown "$tmp/cli" "$bin" "$tmp/out-tree" "${programs[@]}"
for p in "${programs[@]}"; do
  diff -u "$src/docs/cli/$p.md" "$tmp/cli/$p.md" >"$tmp/diff" ||
    fail "docs/cli/$p.md is not what the program's --help gives now (regenerate it, see above): $(head -c 2000 "$tmp/diff")"
done
[ "$(ls "$src/docs/cli" | wc -l)" -eq ${#programs[@]} ] || fail "docs/cli/ holds pages of no program: $(ls "$src/docs/cli")"
echo "cli reference ok"
