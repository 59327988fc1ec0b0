#!/usr/bin/env python3
"""Counts of chosen opcodes in each kernel of a `cuobjdump -sass` listing (the stage scripts' `sass` step).

    sass_counts.py SASS --keys HGMMA,STL,...          one line a kernel (its name shortened)
    sass_counts.py SASS --keys ... --all --tag d64=SUFFIX ... [--serialised-above 20]
                                                      one line a tag: the kernel whose name contains SUFFIX
An opcode counts under a key it starts with (MUFU.EX2 under MUFU.EX2, QGMMA.64x... under QGMMA); --all also counts
every instruction. --serialised-above N marks a kernel with more than N WARPGROUP instructions (ptxas's arrive/wait
pairs around wgmmas it serialised) SERIALISED; a tag matching no kernel, or several, prints "not found once".
"""
import argparse
import collections
import re


def count(path, keys, every):
    fn, counts = None, collections.OrderedDict()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.search(r"Function : (\S+)", line)
            if m:
                fn = m.group(1)
                counts[fn] = collections.Counter()
                continue
            m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
            if fn and m:
                op = m.group(1)
                if every:
                    counts[fn]["all"] += 1
                for key in keys:
                    if op.startswith(key):
                        counts[fn][key] += 1
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sass")
    p.add_argument("--keys", required=True, help="comma-separated opcode prefixes")
    p.add_argument("--all", action="store_true", help="also count every instruction (all=)")
    p.add_argument("--tag", action="append", default=[], metavar="NAME=SUFFIX")
    p.add_argument("--serialised-above", type=int, default=None, metavar="N")
    a = p.parse_args()
    counts = count(a.sass, a.keys.split(","), a.all)
    text = lambda c: " ".join(f"{k}={v}" for k, v in sorted(c.items()))  # noqa: E731
    if not a.tag:
        for fn, c in counts.items():
            short = re.sub(r"_ZN9attention3fa3(\d+)", "", fn)[:60]
            print(f"{short:60s} {text(c)}")
        return
    for tag, suffix in (t.split("=", 1) for t in a.tag):
        found = [f for f in counts if suffix in f]
        if len(found) != 1:
            print(f"{tag:10s} not found once ({len(found)})")
            continue
        c = counts[found[0]]
        serial = a.serialised_above is not None and c["WARPGROUP"] > a.serialised_above
        print(f"{tag:10s} {text(c)}" + ("  SERIALISED" if serial else ""))


if __name__ == "__main__":
    main()
