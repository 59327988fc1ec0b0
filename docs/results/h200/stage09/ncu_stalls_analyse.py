#!/usr/bin/env python3
"""Nsight Compute's PC sampling of one kernel, summed by opcode: `ncu -i REP --page source --print-source sass --csv`
(gzipped) -> each opcode's share of all samples and its top stall reasons. Usage: ncu_stalls_analyse.py SRC.csv.gz..."""
import collections, csv, gzip, re, sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


for path in sys.argv[1:]:
    rows = list(csv.reader(gzip.open(path, "rt")))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total, by_op, samples = collections.Counter(), collections.defaultdict(collections.Counter), 0.0
    for r in data:
        if len(r) < len(hdr):
            continue
        m = re.match(r"\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]+)", r[ix["Source"]])
        op = m.group(1) if m else "?"
        s = num(r[ix["Warp Stall Sampling (All Samples)"]])
        samples += s
        by_op[op]["all"] += s
        by_op[op]["executed"] += num(r[ix["Instructions Executed"]])
        for st in stalls:
            total[st] += num(r[ix[st]])
            by_op[op][st] += num(r[ix[st]])
    t = sum(total.values())
    print(f"== {path}: {samples:.0f} samples")
    print("  all opcodes: " + ", ".join(f"{k[6:]} {v / t * 100:.1f}%" for k, v in total.most_common(8)))
    for op, c in sorted(by_op.items(), key=lambda kv: -kv[1]["all"])[:12]:
        top = sorted(((k, v) for k, v in c.items() if k.startswith("stall_")), key=lambda kv: -kv[1])[:3]
        print(f"  {op:10s} {c['all'] / samples * 100:5.1f}% of samples ({c['executed']:.3g} executed): " +
              ", ".join(f"{k[6:]} {v / max(c['all'], 1) * 100:.0f}%" for k, v in top))
