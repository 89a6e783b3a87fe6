#!/usr/bin/env python3
"""Lists TypeScript functions longer than a limit (default 120 lines) and files longer than a
file limit (default 600 lines).

Usage: python3 tools/long_functions.py [--max 120] [--max-file 600] FILE_OR_GLOB...
e.g.   python3 tools/long_functions.py 'kernels/fused/*.ts' 'methods/*.ts'

Heuristic, for deno-fmt'ed code: strings, template literal text (WGSL) and comments are blanked
first, so braces inside them do not count; a function (declaration, arrow function or method)
starts on a line that declares it and ends before the next line indented no deeper than that line
(a closing bracket at the same indentation is included, unless it reopens a block, as
`): Type {` does after a multi-line parameter list). Exits 1 when anything is over a limit.
"""
import argparse
import glob
import re
import sys

KEYWORDS = {"if", "for", "while", "switch", "catch", "function", "return", "else", "do", "with"}
DECL = re.compile(r"\bfunction\b\s*\*?\s*(\w*)\s*[<(]")
ARROW = re.compile(r"=>")
METHOD = re.compile(r"^\s*(?:async\s+)?(?:get\s+|set\s+)?(\w+)\s*(?:<[^>]*>)?\((.*)$")
NAMED = re.compile(r"(?:const|let|var)\s+(\w+)\s*(?::[^=]+)?=|(\w+)\s*:\s*(?:async\s*)?\(")


def strip_code(src: str) -> tuple[list[str], set[int]]:
    """The source with comments, strings and template text replaced by spaces (newlines kept),
    and the lines that begin inside a template literal (their indentation means nothing)."""
    out = []
    in_template = set()
    line = 0
    i, n = 0, len(src)
    stack = []  # modes: "tpl" (inside template text) or "code" (inside ${ } of a template)
    depth = []  # brace depth inside each ${ }
    while i < n:
        ch = src[i]
        in_tpl = bool(stack) and stack[-1] == "tpl"
        if in_tpl:
            if ch == "\\":
                out.append("  " if src[i + 1:i + 2] != "\n" else " \n")
                i += 2
                continue
            if ch == "`":
                stack.pop()
                out.append("`")
                i += 1
                continue
            if src.startswith("${", i):
                stack.append("code")
                depth.append(0)
                out.append("${")
                i += 2
                continue
            if ch == "\n":
                line += 1
                in_template.add(line)
            out.append("\n" if ch == "\n" else " ")
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if c == "\n" else " " for c in src[i:j]))
            line += src.count("\n", i, j)
            i = j
            continue
        if ch in "'\"":
            j = i + 1
            while j < n and src[j] != ch and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(ch + " " * (j - i - 1) + ch)
            i = j + 1
            continue
        if ch == "`":
            stack.append("tpl")
            out.append("`")
            i += 1
            continue
        if stack and stack[-1] == "code":
            if ch == "{":
                depth[-1] += 1
            elif ch == "}":
                if depth[-1] == 0:
                    stack.pop()
                    depth.pop()
                    out.append("}")
                    i += 1
                    continue
                depth[-1] -= 1
        if ch == "\n":
            line += 1
        out.append(ch)
        i += 1
    return "".join(out).split("\n"), in_template


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def function_starts(lines: list[str]):
    for no, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        m = DECL.search(s)
        if m:
            yield no, m.group(1) or "(anonymous function)"
            continue
        if ARROW.search(s):
            nm = NAMED.search(s)
            yield no, (nm.group(1) or nm.group(2)) if nm else "(arrow)"
            continue
        m = METHOD.match(line)
        if m and m.group(1) not in KEYWORDS and s.endswith(("{", "(")) and not s.startswith(
            ("new ", "await ", "return ")
        ) and "=" not in s.split("(")[0]:
            yield no, m.group(1)


def function_end(lines: list[str], in_template: set[int], start: int) -> int:
    base = indent(lines[start])
    last = start
    for no in range(start + 1, len(lines)):
        s = lines[no].strip()
        if not s:
            continue
        if no in in_template:
            last = no
            continue
        ind = indent(lines[no])
        if ind > base:
            last = no
            continue
        if ind == base and s[0] in ")]}":
            if s.endswith(("{", "(", "[", "=>")):
                last = no
                continue
            return no
        return last
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--max", type=int, default=120, help="most lines of a function")
    ap.add_argument("--max-file", type=int, default=600, help="most lines of a file")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    files = sorted({f for p in a.paths for f in (glob.glob(p) or [p])})
    bad = 0
    for f in files:
        src = open(f, encoding="utf-8").read()
        raw = src.split("\n")
        if len(raw) - (1 if src.endswith("\n") else 0) > a.max_file:
            print(f"{f}: file has {len(raw) - 1} lines (> {a.max_file})")
            bad += 1
        lines, in_template = strip_code(src)
        for start, name in function_starts(lines):
            end = function_end(lines, in_template, start)
            length = end - start + 1
            if length > a.max:
                print(f"{f}:{start + 1}: {name} has {length} lines (> {a.max})")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
