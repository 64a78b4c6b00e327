#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit, and the source files longer than another.

    scripts/long_functions.py [--max-lines 80] [--allow N] [--hard-max 120] [--max-file-lines 1500]
        [--report-only] DIR_OR_FILE ...

A function's length is the lines from the first line of its signature to its closing brace. A
function is a brace block at namespace or class scope whose header (the text since the previous
declaration) has a parameter list; lambdas and blocks inside a function count toward it.
Comments, string and character literals (raw strings too) are blanked before braces are counted,
and the braces of a constructor's member initializers are not taken for its body.

Exits 1 when more than --allow functions exceed --max-lines, when any exceeds --hard-max, or
when a file exceeds --max-file-lines (generated tables, *_generated.*, are exempt); with
--report-only it prints the same and exits 0. Each long function over --max-lines must say why
it is long in a comment that contains "long:" within the three lines above its signature (a
table-like switch); one without it fails.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SUFFIXES = (".cc", ".cpp", ".h", ".hpp")
INIT_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
CLASS_HEAD = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union|enum)\b", re.S)
OPERATOR = re.compile(r"operator\s*(?:\(\)|[^\s(]+)\s*\(")


def blank(text: str) -> str:
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def classify(header: str) -> str:
    """namespace, class, function or other, for the text before a `{` at declaration scope."""
    h = " ".join(header.split())
    h = re.sub(r"^(?:public|private|protected)\s*:\s*", "", h)
    if re.search(r"\bnamespace\b", h) or h.startswith('extern "C"') or h == "extern":
        return "namespace"
    if CLASS_HEAD.match(h) and "(" not in h.split("{")[0].split(":")[0]:
        return "class"
    if "(" not in h:
        return "other"
    stripped = OPERATOR.sub("operator(", h)
    depth = 0
    for ch in stripped:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        elif ch == "=" and depth == 0:
            return "other"  # an initializer: `constexpr X k[] = {`, `auto f = [] {`
    return "function"


def functions(path: Path):
    """(name, first line, last line) of each function in the file."""
    text = blank(path.read_text(encoding="utf-8", errors="replace"))
    stack = []  # (kind, header start offset) per open brace
    header_start = 0
    found = []
    line_of = [0]
    for ch in text:
        line_of.append(line_of[-1] + (ch == "\n"))
    for i, c in enumerate(text):
        in_decl_scope = all(k in ("namespace", "class") for k, _ in stack)
        if c == "{":
            if not in_decl_scope:
                stack.append(("block", i))
                continue
            header = text[header_start:i]
            prev = header.rstrip()[-1:] if header.strip() else ""
            if INIT_LIST.search(header) and (prev.isalnum() or prev in "_>"):
                stack.append(("init", header_start))  # a member initializer's braces
                continue
            stack.append((classify(header), header_start))
        elif c == "}":
            if not stack:
                continue
            kind, start = stack.pop()
            if kind == "init":
                continue  # the header goes on
            if kind == "function":
                head = text[start:i]
                first = start + len(head) - len(head.lstrip())
                m = re.search(r"([~\w:]+(?:operator\s*\S+?)?)\s*\(", " ".join(head.split()))
                found.append((m.group(1) if m else "?", line_of[first] + 1, line_of[i] + 1))
            if all(k in ("namespace", "class") for k, _ in stack):
                header_start = i + 1
        elif c == ";" and in_decl_scope:
            header_start = i + 1
        elif c == ":" and in_decl_scope and re.search(
                r"(?:public|private|protected)\s*$", text[header_start:i]):
            header_start = i + 1
        elif c == "#" and in_decl_scope and text[header_start:i].strip() == "":
            j = text.find("\n", i)
            while j > 0 and text[j - 1] == "\\":
                j = text.find("\n", j + 1)
            header_start = (len(text) if j < 0 else j)  # a preprocessor line
    return found


def justified(lines: list[str], first: int) -> bool:
    """Whether a comment with "long:" sits in the three lines above line `first` (1-based)."""
    return any("long:" in lines[k] for k in range(max(0, first - 4), first - 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--max-lines", type=int, default=80)
    ap.add_argument("--allow", type=int, default=5, help="functions allowed over --max-lines")
    ap.add_argument("--hard-max", type=int, default=120)
    ap.add_argument("--max-file-lines", type=int, default=1500)
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    files = []
    for p in map(Path, a.paths):
        files += sorted(f for f in p.rglob("*") if f.suffix in SUFFIXES) if p.is_dir() else [p]
    long_fns, problems = [], []
    for f in files:
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > a.max_file_lines and "_generated" not in f.name:
            problems.append(f"{f}: {len(lines)} lines (limit {a.max_file_lines})")
        for name, first, last in functions(f):
            n = last - first + 1
            if n > a.max_lines:
                long_fns.append((n, f"{f}:{first}", name, justified(lines, first)))
    long_fns.sort(reverse=True)
    for n, where, name, ok in long_fns:
        print(f"{n:5d}  {where}  {name}" + ("" if ok else "  (no 'long:' comment)"))
        if n > a.hard_max:
            problems.append(f"{where}: {name} is {n} lines (hard limit {a.hard_max})")
        elif not ok:
            problems.append(f"{where}: {name} is {n} lines without a 'long:' comment saying why")
    if len(long_fns) > a.allow:
        problems.append(f"{len(long_fns)} functions over {a.max_lines} lines (at most {a.allow})")
    print(f"{len(long_fns)} functions over {a.max_lines} lines in {len(files)} files")
    for p in problems:
        print("problem: " + p)
    return 0 if a.report_only or not problems else 1


if __name__ == "__main__":
    sys.exit(main())
