#!/usr/bin/env python3
"""Links into code by line number (`path#L12` or `path#L12-L20`) in README.md and docs/**/*.md, kept on
the lines they mean.

Each such link says what the first line of its range holds: its title (`[L12](file.cu#L12 "fetch_kv")`) or, without one,
its text when that is a name (`` [`online_softmax`](tc_common.cuh#L264) ``; several names, comma-separated,
must all be there). The check fails when a line range does not hold what its link names, or when a link
says nothing it can check. --update moves each range to the nearest lines that hold it (its length
kept) and rewrites the link text where it is the line number itself."""
import argparse, pathlib, re, sys

LINK = re.compile(r'\[([^\]]+)\]\(([^)\s#]+)#L(\d+)(?:-L(\d+))?(?: "([^"]+)")?\)')


def expected(text, title):
    if title:
        return [title]
    names = [t.strip().strip("`") for t in text.split(",")]
    if re.fullmatch(r"L\d+(?:[–-]\d+)?", text):
        return None  # a line number says nothing about the line
    if all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_:]*", n) for n in names):
        return names
    return None


def holds(lines, a, b, names):  # the range's first line holds the first name, the range every name
    block = "\n".join(lines[a - 1:b])
    return 1 <= a <= len(lines) and names[0] in lines[a - 1] and all(n in block for n in names)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=".")
    ap.add_argument("--update", action="store_true", help="move each range to the lines that hold what it names")
    a = ap.parse_args()
    root = pathlib.Path(a.root).resolve()
    problems, links = [], 0
    for md in [root / "README.md"] + sorted((root / "docs").rglob("*.md")):
        text = md.read_text()

        def visit(m):
            nonlocal links
            links += 1
            label, path, first, last, title = m.group(1), m.group(2), int(m.group(3)), m.group(4), m.group(5)
            last = int(last) if last else first
            target = (md.parent / path).resolve()
            where = f"{md.relative_to(root)}: [{label}]({path}#L{first}{f'-L{last}' if last != first else ''})"
            names = expected(label, title)
            if names is None:
                problems.append(f"{where}: says nothing to check (give it a title: the text its lines hold)")
                return m.group(0)
            if not target.is_file():
                problems.append(f"{where}: no such file")
                return m.group(0)
            lines = target.read_text().split("\n")
            if holds(lines, first, last, names):
                return m.group(0)
            span = last - first
            # where the range could start: lines holding the first name (a definition's first line)
            found = [s for s in range(1, len(lines) - span + 1) if holds(lines, s, s + span, names)]
            if not a.update or not found:
                problems.append(f"{where}: lines {first}-{last} do not hold {names}" +
                                (f" (they are at {found[:3]})" if found else " (nowhere in the file)"))
                return m.group(0)
            s = min(found, key=lambda x: abs(x - first))
            rng = f"L{s}" + (f"-L{s + span}" if span else "")
            new_label = label
            if re.fullmatch(r"L\d+(?:[–-]\d+)?", label):
                new_label = f"L{s}" + (f"–{s + span}" if span else "")
            return f"[{new_label}]({path}#{rng}" + (f' "{title}"' if title else "") + ")"

        new = LINK.sub(visit, text)
        if a.update and new != text:
            md.write_text(new)
    for p in problems:
        print(p)
    print(f"check_anchors: {links} links into code by line, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
