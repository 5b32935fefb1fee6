#!/usr/bin/env python3
"""Man pages and bash completions of the programs, from their own --help.

  python3 scripts/gen_cli_docs.py [--markdown DOCS_DIR] BIN_DIR OUT_DIR PROGRAM...

Writes OUT_DIR/share/man/man1/PROGRAM.1 (roff: the program's description,
its global options, then one section per subcommand with its usage and
options) and OUT_DIR/share/bash-completion/completions/PROGRAM (subcommands,
then each one's flags), and with --markdown DOCS_DIR/PROGRAM.md (the
reference pages under docs/cli/). Everything comes from running `PROGRAM --help` and
`PROGRAM SUB --help` (CLI11's layout), so the pages cannot drift from the
programs. The build runs it (target cli_docs) and `cmake --install` installs
what it wrote.
"""
import re
import subprocess
import sys
from pathlib import Path

SECTION = re.compile(r"^(Options|Subcommands|Positionals):\s*$")
ENTRY = re.compile(r"^  (\S.*?)(?:\s{2,}(\S.*))?$")


def help_of(binary, *args):
    r = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"{binary} {' '.join(args)} --help exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def parse(text):
    """(description lines, usage, {section: [(name, description)]}) of one --help."""
    description, usage, sections, current = [], "", {}, None
    for line in text.splitlines():
        if line.startswith("Usage: "):
            usage = line[len("Usage: "):]
            continue
        m = SECTION.match(line)
        if m:
            current = sections.setdefault(m.group(1), [])
            continue
        if current is None:
            if line.strip():
                description.append(line.strip())
            continue
        e = ENTRY.match(line)
        if e:
            current.append(split_entry(e.group(1).strip(), (e.group(2) or "").strip()))
        elif line.startswith("    ") and current:  # a wrapped description
            current[-1][1] = (current[-1][1] + " " + line.strip()).strip()
    return description, usage, sections


def split_entry(name, text):
    """CLI11 leaves one space, not a column, after a signature too long for
    its column ("--damp FLOAT:in [0, 1]=0.01 Diagonal ..."): the signature is
    the flags, then type words, ranges and the default; the rest describes."""
    if text:
        return [name, text]
    words, depth = name.split(" "), 0
    for i, w in enumerate(words):
        if i == 0 or depth > 0 or re.fullmatch(r"[A-Z_]+(:\S*)?(=\S*)?|REQUIRED|\.\.\.|\S*[\[\]=:]\S*", w):
            depth += w.count("[") - w.count("]")
            continue
        return [" ".join(words[:i]), " ".join(words[i:])]
    return [name, ""]


def flags_of(entries):
    """The flag spellings of option entries ("-o,--output TEXT REQUIRED" -> -o, --output)."""
    out = []
    for name, _ in entries:
        for part in name.split()[0].split(","):
            if part.startswith("-"):
                out.append(part)
    return out


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def man_page(program, version, top, subs):
    description, usage, sections = top
    lines = [f'.TH {program.upper()} 1 "" "gpufleet {version}" "User Commands"', ".SH NAME",
             f"{program} \\- {roff(description[0] if description else program)}", ".SH SYNOPSIS", f".B {roff(usage)}"]
    lines += [".SH DESCRIPTION", roff(" ".join(description))]

    def options(entries):
        for name, text in entries:
            lines.extend([".TP", f".B {roff(name)}", roff(text)])

    lines.append(".SH OPTIONS")
    options(sections.get("Options", []))
    for name, (sub_description, sub_usage, sub_sections) in subs.items():
        lines += [f".SH {roff(program.upper() + ' ' + name.upper())}", roff(" ".join(sub_description)),
                  ".PP", f".B {roff(sub_usage)}"]
        if sub_sections.get("Positionals"):
            lines.append(".SS Arguments")
            options(sub_sections["Positionals"])
        lines.append(".SS Options")
        options(sub_sections.get("Options", []))
    lines += [".SH SEE ALSO", "The project's README.md and docs/ folder."]
    return "\n".join(lines) + "\n"


def completion(program, top, subs):
    func = "_" + program.replace("-", "_")
    top_flags = " ".join(flags_of(top[2].get("Options", [])))
    cases = "\n".join(f"    {name}) words=\"{' '.join(flags_of(s[2].get('Options', [])))}\" ;;"
                      for name, s in subs.items())
    return f"""# bash completion for {program} (generated from its --help)
{func}() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} sub="" i words
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in -*) ;; *) sub=${{COMP_WORDS[i]}}; break ;; esac
  done
  case $sub in
{cases}
    *) words="{' '.join(subs)} {top_flags}" ;;
  esac
  if [[ $cur != -* && -n $sub ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  fi
}}
complete -o filenames -F {func} {program}
"""


def markdown_page(program, top, subs):
    description, usage, sections = top

    def table(entries, what="option"):
        rows = [f"| {what} | meaning |", "|---|---|"]
        for name, text in entries:
            rows.append(f"| `{name}` | {text.replace('|', '&#124;')} |")
        return rows

    lines = [f"# {program}", "", "<!-- Generated by scripts/gen_cli_docs.py from the program's --help;"
             " tests/apps/check_cli_reference.sh keeps it current. -->", "", " ".join(description), "",
             f"`{usage}`", "", "Options every subcommand takes as well:", ""]
    lines += table(sections.get("Options", []))
    for name, (sub_description, sub_usage, sub_sections) in subs.items():
        lines += ["", f"## {program} {name}", "", " ".join(sub_description), "", f"`{sub_usage}`", ""]
        if sub_sections.get("Positionals"):
            lines += table(sub_sections["Positionals"], "argument") + [""]
        lines += table(sub_sections.get("Options", []))
    return "\n".join(lines) + "\n"


def main():
    args = sys.argv[1:]
    markdown = None
    if args[:1] == ["--markdown"]:
        markdown, args = Path(args[1]), args[2:]
    if len(args) < 3:
        print(__doc__)
        return 2
    bin_dir, out = Path(args[0]), Path(args[1])
    man_dir, comp_dir = out / "share/man/man1", out / "share/bash-completion/completions"
    man_dir.mkdir(parents=True, exist_ok=True)
    comp_dir.mkdir(parents=True, exist_ok=True)
    if markdown:
        markdown.mkdir(parents=True, exist_ok=True)
    for program in args[2:]:
        binary = bin_dir / program
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60).stdout.split()
        version = version[2] if len(version) > 2 else ""
        top = parse(help_of(binary))
        subs = {name: parse(help_of(binary, name)) for name, _ in top[2].get("Subcommands", [])}
        (man_dir / f"{program}.1").write_text(man_page(program, version, top, subs))
        (comp_dir / program).write_text(completion(program, top, subs))
        if markdown:
            (markdown / f"{program}.md").write_text(markdown_page(program, top, subs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
