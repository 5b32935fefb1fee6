#!/usr/bin/env python3
"""No C++ function longer than 80 lines (docs/architecture.md): a longer one
is split into steps with names, as the rest of the code is. Lists every
offender with its file, line and length.

    check_function_length.py SOURCE_DIR
"""
import pathlib
import sys

import lizard

LIMIT = 80
FOLDERS = ("lib", "apps", "scripts", "tests")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".inc"}


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    offenders = []
    files = 0
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            files += 1
            for fn in lizard.analyze_file(str(path)).function_list:
                if fn.length > LIMIT:
                    offenders.append(f"{path.relative_to(root)}:{fn.start_line}: {fn.long_name} has {fn.length} lines")
    if files == 0:
        print(f"FAIL: no C++ sources under {root}", file=sys.stderr)
        return 1
    for line in offenders:
        print(f"FAIL: {line} (more than {LIMIT}: split it)", file=sys.stderr)
    print(f"{files} files, {len(offenders)} functions over {LIMIT} lines")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
