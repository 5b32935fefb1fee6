#!/usr/bin/env bash
# The line between the libraries and the programs (docs/architecture.md):
# nothing under lib/ parses flags (CLI11) or prints a report on stdout, and
# each library folder includes only the folders below it. Fails with the
# offending lines.
#   tests/apps/check_library_boundary.sh SOURCE_DIR
set -euo pipefail
src=${1:?source dir}
cd "$src"
status=0
fail() { echo "FAIL: $1" >&2; printf '%s\n' "$2" >&2; status=1; }

hits=$(grep -rnE '#include <CLI/' lib || true)
[ -z "$hits" ] || fail "a library includes CLI11 (flags are parsed in apps/)" "$hits"

# Reports on stdout are the programs' (apps/). Allowed: report_stream, the
# helper that picks stdout or stderr for the programs, and the flush before a
# container or model is written to stdout ("-o -": data, not a report).
hits=$(grep -rnE 'std::cout|(^|[^a-zA-Z_])(std::)?(printf|puts)\(' lib --include=*.cpp --include=*.h --include=*.cu \
  | grep -vE '^lib/common/output_check\.cpp:.*report_stream|^lib/common/atomic_file\.cpp:.*std::cout\.flush\(\)' \
  || true)
[ -z "$hits" ] || fail "a library prints to stdout (return a result; apps/ prints it)" "$hits"

# Include direction: each folder may include itself and the folders listed.
allowed() {
  case $1 in
    common) echo "common fleet" ;;
    devices) echo "devices common fleet" ;;
    text) echo "text common fleet" ;;
    model) echo "model text common fleet" ;;
    sailor) echo "sailor common fleet" ;;            # the planner
    sailor/runtime) echo "sailor model text common fleet" ;;
    orion) echo "orion common fleet" ;;
    deltazip) echo "deltazip model text common fleet" ;;
  esac
}
for folder in common devices text model sailor sailor/runtime orion deltazip; do
  files=$(find "lib/$folder" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
  # Subfolders other than runtime/ belong to their parent's rules.
  [ "$folder" = sailor ] || files+=$'\n'$(find "lib/$folder" -mindepth 2 -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null || true)
  [ "$folder" != sailor/runtime ] || files=$(find "lib/sailor/runtime" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \))
  ok=$(allowed "$folder")
  for f in $files; do
    [ -f "$f" ] || continue
    while IFS= read -r inc; do
      top=${inc%%/*}
      [ "$folder" = sailor ] && [ "$inc" != "${inc#sailor/runtime/}" ] && top=sailor/runtime
      [[ " $ok " == *" $top "* ]] || fail "$f includes \"$inc\": lib/$folder may include only: $ok" ""
    done < <(grep -oE '^#include "[^"]+"' "$f" | sed -E 's/#include "(.*)"/\1/' | grep '/' || true)
  done
done

# The libtorch boundary is drawn by folders: only files under a torch/
# folder include libtorch (<torch/...>, <c10/...>, <ATen/...>) or a header
# of a torch/ folder; everything else builds without it.
hits=$(find lib -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -not -path '*/torch/*' -print0 \
  | xargs -0 grep -nE '^#include (<(torch|c10|ATen)/|"[^"]*/torch/)' || true)
[ -z "$hits" ] || fail "a file outside a torch/ folder includes libtorch or a torch/ header" "$hits"
exit $status
