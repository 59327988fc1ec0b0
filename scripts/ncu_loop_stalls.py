#!/usr/bin/env python3
"""Where a kernel's main loop spends its warp-stall samples, from Nsight Compute's source page.

    ncu --section SourceCounters --section WarpStateStats --import-source no --export rep ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 scripts/ncu_loop_stalls.py src.csv [sum|list]

The main loop is taken to be the instructions executed as often as the most frequent count that more
than 50 instructions share (a loop over key blocks runs each of its instructions once an iteration);
its span runs from the first to the last of them, branches that were not taken included. `sum`
prints the loop's opcodes (how many, and their share of all samples) and its stall reasons; `list`
adds every executed instruction of the span with its samples and two largest reasons (a `*` marks
those above 0.4 % of the samples). The file may be gzip-compressed.
"""
import collections
import csv
import gzip
import re
import sys


def main():
    if len(sys.argv) < 2 or (len(sys.argv) > 2 and sys.argv[2] not in ("sum", "list")):
        sys.exit("usage: ncu_loop_stalls.py SOURCE_PAGE.csv[.gz] [sum|list]")
    path, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "list"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(f))
    if len(rows) < 3 or "Address" not in rows[1]:
        sys.exit(f"{path}: not an Nsight Compute source page in CSV (--page source --csv --print-source sass)")
    hdr, ix = rows[1], {h: i for i, h in enumerate(rows[1])}
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not Issued)" not in h]
    ins = []
    for r in rows[2:]:
        if len(r) < len(hdr):
            continue
        num = lambda col: int(r[ix[col]] or 0)
        ins.append(dict(src=r[ix["Source"]].strip(), samp=num("Warp Stall Sampling (All Samples)"),
                        ex=num("Instructions Executed"), st={s: num(s) for s in stalls}))
    total = sum(i["samp"] for i in ins)
    counts = collections.Counter(i["ex"] for i in ins if i["ex"] > 0)
    common = [e for e in counts if counts[e] > 50]
    if not common or total == 0:
        sys.exit(f"{path}: no loop found (no execution count shared by more than 50 instructions) or no samples")
    loop_ex = max(common)
    body = [k for k, i in enumerate(ins) if i["ex"] == loop_ex]
    span = ins[body[0]:body[-1] + 1]
    in_loop = sum(i["samp"] for i in span)
    print(f"samples {total}; the loop: {loop_ex} executions of each of {len(body)} instructions; "
          f"its span {len(span)} instructions, {in_loop} samples ({100 * in_loop / total:.1f} %)")
    ops, op_samples, reasons = collections.Counter(), collections.Counter(), collections.Counter()
    for i in span:
        op = re.sub(r"^@!?U?P\w+\s+", "", i["src"]).split()[0].split(".")[0]
        ops[op] += 1
        op_samples[op] += i["samp"]
        reasons.update(i["st"])
    print("opcode        count  % of samples")
    for op, c in ops.most_common():
        print(f"  {op:12s} {c:4d}  {100 * op_samples[op] / total:5.1f}")
    print("the loop's stall reasons:", ", ".join(f"{s[6:]} {100 * v / total:.1f} %" for s, v in reasons.most_common(8)))
    if mode == "list":
        for k, i in enumerate(span):
            if i["ex"] == 0:
                continue
            top = " ".join(f"{s[6:]}:{v}" for s, v in sorted(i["st"].items(), key=lambda x: -x[1])[:2] if v)
            mark = "*" if i["samp"] > 0.004 * total else " "
            print(f"{k:4d}{mark} {i['ex']:9d} {i['samp']:6d}  {i['src'][:70]:70s} {top}")


if __name__ == "__main__":
    main()
