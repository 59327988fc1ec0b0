#!/usr/bin/env python3
"""A stage's IO three ways, from its program's CSV: each variant's bytes by the model, by the CPU count
and by the GPU's counters (SM <-> L2 reads + writes, and DRAM), each against the model.

    python3 scripts/io_table.py io.csv [--dtype fp16] [--extra io_metrics.txt --metric NAME]

--extra: the program's stdout with --metrics NAME (its "extra counters" lines); the metric's value
(L2 sectors, 32 bytes each) is shown as bytes beside the others, e.g. lts__t_sectors_op_red.sum,
the L2's reductions (stage 11: dQ's sums). A markdown table on stdout, a row a (variant, problem)."""
import argparse
import csv
import re
import sys


def gb(x):
    return f"{x / 1e9:.3f}" if x is not None else "n/a"


def times(x, model):
    return f"{x / model:.2f}×" if x is not None and model else "n/a"


def number(text):
    return float(text) if text not in (None, "") else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--dtype", default="")
    p.add_argument("--extra", help="the program's stdout with its --metrics lines")
    p.add_argument("--metric", default="", help="the --metrics name to show (L2 sectors, 32 bytes each)")
    args = p.parse_args()
    extra = {}
    if args.extra and args.metric:
        line = re.compile(r"^\s*(\S+)\s+(.*?)\s+" + re.escape(args.metric) + r" = (\S+)\s*$")
        for text in open(args.extra, errors="replace"):
            m = line.match(text)
            if m:
                extra[(m.group(1), m.group(2).strip())] = 32.0 * float(m.group(3))
    rows = [r for r in csv.DictReader(open(args.csv)) if not args.dtype or r["dtype"] == args.dtype]
    rows = [r for r in rows if number(r.get("io_model_bytes"))]
    if not rows:
        sys.exit(f"io_table.py: {args.csv}: no rows with a model")
    head = ["variant", "problem", "model GB", "CPU count", "SM↔L2 r+w", "DRAM r+w"]
    if args.metric:
        head.append(f"{args.metric} (bytes)")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    seen = set()
    for r in rows:
        key = (r["variant"], r["dtype"], r["shape"])
        if key in seen:  # rounds: the counters are the first round's
            continue
        seen.add(key)
        model = number(r["io_model_bytes"])
        l2 = (number(r["l2_read_bytes"]) or 0) + (number(r["l2_write_bytes"]) or 0) if r.get("l2_read_bytes") else None
        dram = (number(r["dram_read_bytes"]) or 0) + (number(r["dram_write_bytes"]) or 0) if r.get("dram_read_bytes") else None
        problem = " ".join(x for x in r["shape"].split() if not x.startswith(("Br=", "Bc=")))
        out = [f"`{r['variant']}`", f"{r['dtype']} {problem}", gb(model), times(number(r.get("io_counted_bytes")), model),
               times(l2, model), times(dram, model)]
        if args.metric:
            value = extra.get((r["variant"], r["shape"]))
            out.append(f"{gb(value)} GB ({times(value, model)})" if value is not None else "n/a")
        print("| " + " | ".join(out) + " |")
    print()
    print("(each measure over the model; SM↔L2 and DRAM from the GPU's counters, the first round)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
