#!/usr/bin/env python3
"""Check that README.md and the Markdown under docs/ hold no control characters.

    python3 scripts/check_control_chars.py [--root REPO]

A control character is a byte below 0x20 other than the line feed, or DEL (0x7F). None belongs in
the course's Markdown (it has no TABs and no carriage returns), and one usually means that LaTeX
went through a string with escapes: "\\varepsilon" written in a Python string without r"" becomes
a vertical tab (0x0B) and "arepsilon", "\\text" a TAB and "ext". The page then renders wrong.

Prints every file:line:column with the character's code and exits 1, or prints a summary and
exits 0. Standard library only, so that it runs as a CPU test (CTest: docs_control_chars, label cpu).
"""
import argparse
import os
import sys


def is_control(ch):
    return (ord(ch) < 0x20 and ch != "\n") or ch == "\x7f"


def markdown_files(root):
    yield "README.md"
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "docs")):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(".md"):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def check(root):
    problems, files = [], 0
    for path in markdown_files(root):
        files += 1
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for n, line in enumerate(f.read().split("\n"), 1):
                for col, ch in enumerate(line, 1):
                    if is_control(ch):
                        problems.append(f"{path}:{n}:{col}: control character 0x{ord(ch):02X} in {line.strip()!r}")
    return problems, files


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = p.parse_args()
    problems, files = check(args.root)
    for x in problems:
        print("CONTROL " + x)
    if problems:
        print(f"check_control_chars: {len(problems)} control character(s)")
        return 1
    print(f"check_control_chars: {files} Markdown files, no control characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
