#!/usr/bin/env python3
"""Ours against the peers, cell by cell, round k against round k, with the spread and the kernel time.

    python3 scripts/fairness.py bench.csv [more.csv ...] [--markdown | --compact | --brief | --grid OURS PEER] [--stage 08]

For every problem (a cell: stage, dtype, shape without our block sizes) that has rows of ours and
of a peer (pytorch_*, triton_*) timed on a GPU: each side's TFLOP/s as the median of its rounds with
their min-max (a row a round: the CSV's round column, written by --rounds and the peers' --serve;
rows without it count in the order they come), and ours / peer as a speed ratio (the peer's time
over ours) round by round, k against k, median and min-max. Then the kernel-level check, where the
rows have it (--kernel-time, first round): each side's kernel time against its event time of the
same round (a positive difference would be host work in the event time), the ratio at kernel level,
and the pieces of GPU work a call runs (ours / the peer's: a layout copy would show there). Standard
library only; scripts/report.py puts the same table in summary.md. --compact: a short line a cell
and peer; --brief: a line for each stage, variant of ours and peer, over its cells (the range of the
cells' median ratios, the cells whose rounds fall on both sides of 1, the kernel level, the host's
share, the pieces of GPU work); --stage keeps the stages whose name starts so.
"""
import argparse
import csv
import statistics
import sys
from collections import OrderedDict


def is_peer(variant):
    return variant.startswith("pytorch_") or variant.startswith("triton_")


def mode(variant):
    """Rows that time the same thing: forward + backward apart from the rest."""
    return "fwdbwd" if variant.endswith("_fwdbwd") or variant.endswith("_fwdbwd_bhnd") else ""


def number(text):
    return float(text) if text not in ("", None) else None


def cells(rows):
    """OrderedDict: (stage, dtype, shape) -> variant -> [row, ...] in round order, GPU rows with a time."""
    out = OrderedDict()
    seen = {}
    for r in rows:
        ms = number(r.get("ms"))
        if r.get("device") in (None, "", "cpu") or ms is None:
            continue
        key = (r["stage"], r.get("dtype") or "", r["shape"].split(" Br=")[0])
        runs = out.setdefault(key, OrderedDict()).setdefault(r["variant"], [])
        order = seen.get((key, r["variant"]), 0) + 1
        seen[(key, r["variant"])] = order
        round_no = number(r.get("round"))
        runs.append(dict(round=int(round_no) if round_no is not None else order, ms=ms,
                         flops=number(r.get("flops")), kernel_ms=number(r.get("kernel_ms")),
                         kernels=number(r.get("kernels"))))
    return out


def spread(values):
    return (statistics.median(values), min(values), max(values)) if values else None


def first_round(runs):
    return min(runs, key=lambda x: x["round"])


def compare(rows):
    """One dict a (cell, ours, peer): medians and spreads, ratios round by round, the kernel level."""
    out = []
    for (stage, dtype, shape), variants in cells(rows).items():
        ours = [v for v in variants if not is_peer(v)]
        peers = [v for v in variants if is_peer(v)]
        for o in ours:
            for p in peers:
                if mode(o) != mode(p):
                    continue
                a, b = variants[o], variants[p]
                tf = lambda runs: [x["flops"] / (x["ms"] * 1e9) for x in runs if x["flops"]]  # noqa: E731
                by_round = {x["round"]: x["ms"] for x in b}
                ratios = [by_round[x["round"]] / x["ms"] for x in a if x["round"] in by_round]
                fa, fb = first_round(a), first_round(b)
                kernel_ratio = (fb["kernel_ms"] / fa["kernel_ms"]) if fa["kernel_ms"] and fb["kernel_ms"] else None
                out.append(dict(stage=stage, dtype=dtype, shape=shape, ours=o, peer=p,
                                ours_tflops=spread(tf(a)), peer_tflops=spread(tf(b)),
                                rounds=(len(a), len(b)), ratio=spread(ratios), pairs=len(ratios),
                                kernel_ratio=kernel_ratio,
                                ours_host=host_share(fa), peer_host=host_share(fb),
                                ops=(fa["kernels"], fb["kernels"])))
    return out


def host_share(run):
    """How much longer the event time of a round is than its kernel time (None without one)."""
    return run["ms"] / run["kernel_ms"] - 1.0 if run["kernel_ms"] else None


def fields(shape):
    return dict(item.split("=", 1) for item in shape.split() if "=" in item)


def fmt_spread(s, spec):
    if s is None:
        return "n/a"
    return f"{format(s[0], spec)} [{format(s[1], spec)}-{format(s[2], spec)}]"


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def fmt_ops(ops):
    return "/".join("?" if o is None else str(int(o)) for o in ops)


HEADER = ["stage", "dtype", "shape", "ours", "peer", "ours TFLOP/s", "peer TFLOP/s", "rounds",
          "ours / peer, round k vs k", "at kernel level", "events over kernels: ours / peer", "GPU ops a call"]


def table_rows(comparisons):
    rows = []
    for c in comparisons:
        f = fields(c["shape"])
        shape = f"d={f.get('d', '?')} causal={f.get('causal', '?')} N={f.get('N', '?')} B={f.get('B', '?')} H={f.get('H', '?')}"
        rows.append([c["stage"][:2], c["dtype"], shape, c["ours"], c["peer"], fmt_spread(c["ours_tflops"], ".1f"),
                     fmt_spread(c["peer_tflops"], ".1f"), f"{c['rounds'][0]}/{c['rounds'][1]}",
                     fmt_spread(c["ratio"], ".3f"), fmt(c["kernel_ratio"], ".3f"),
                     f"{fmt(c['ours_host'], '+.1%')} / {fmt(c['peer_host'], '+.1%')}", fmt_ops(c["ops"])])
    return rows


def text_table(comparisons):
    rows = [HEADER] + table_rows(comparisons)
    width = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, width)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def markdown_table(comparisons):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(comparisons)]
    return "\n".join(lines)


def compact_lines(comparisons):
    lines = []
    for c in comparisons:
        f = fields(c["shape"])
        cell = f"{c['stage'][:2]} {c['dtype']} d={f.get('d')} c={f.get('causal')} N={f.get('N')}"
        lines.append(f"{cell:24s} {c['ours'] + '/' + c['peer']:32s} {fmt_spread(c['ratio'], '.3f'):22s} "
                     f"kernel {fmt(c['kernel_ratio'], '.3f'):6s} ev/kern {fmt(c['ours_host'], '+.1%')}/"
                     f"{fmt(c['peer_host'], '+.1%')} ops {fmt_ops(c['ops'])}")
    return "\n".join(lines)


def brief_lines(comparisons):
    groups = OrderedDict()
    for c in comparisons:
        groups.setdefault((c["stage"], c["ours"], c["peer"]), []).append(c)
    lines = []
    for (stage, ours, peer), cs in groups.items():
        medians = [c["ratio"][0] for c in cs if c["ratio"]]
        straddle = sum(1 for c in cs if c["ratio"] and c["ratio"][1] < 1.0 < c["ratio"][2])
        kernel = [c["kernel_ratio"] for c in cs if c["kernel_ratio"] is not None]
        span = lambda v, spec: f"{format(min(v), spec)} to {format(max(v), spec)}" if v else "n/a"  # noqa: E731
        ops = lambda i: "/".join(sorted({fmt_ops((c["ops"][i],)) for c in cs}))  # noqa: E731
        lines.append(f"{stage} {ours} / {peer}: {len(cs)} cells; ratio (median of rounds) {span(medians, '.3f')}, "
                     f"{straddle} cells with rounds on both sides of 1; kernel level {span(kernel, '.3f')}; "
                     f"events over kernels: ours {span([c['ours_host'] for c in cs if c['ours_host'] is not None], '+.1%')}, "
                     f"peer {span([c['peer_host'] for c in cs if c['peer_host'] is not None], '+.1%')}; "
                     f"GPU ops a call: ours {ops(0)}, peer {ops(1)}")
    return "\n".join(lines)


def grid_table(comparisons, ours, peer):
    """A Markdown grid for one variant of ours against one peer in its faster layout (PEER or PEER_bhnd,
    by the peer's median TFLOP/s in the cell): a row a (d, causal, N), two columns a dtype (kernel level;
    events, median of the rounds [min-max])."""
    best = OrderedDict()  # (dtype, d, causal, N) -> the comparison with the peer's faster layout
    for c in comparisons:
        if c["ours"] != ours or c["peer"] not in (peer, peer + "_bhnd"):
            continue
        f = fields(c["shape"])
        key = (c["dtype"], int(f["d"]), f["causal"], int(f["N"]))
        if key not in best or (c["peer_tflops"] or (0,))[0] > (best[key]["peer_tflops"] or (0,))[0]:
            best[key] = c
    dtypes = sorted({k[0] for k in best}, key=lambda t: (t != "fp16", t))
    rows = sorted({k[1:] for k in best})
    head = ["cell"] + [f"{t}: {w}" for t in dtypes for w in ("kernel level", "events")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d, causal, N in rows:
        cell = f"d = {d}{', causal' if causal == '1' else ''}, N = {N}"
        out = []
        for t in dtypes:
            c = best.get((t, d, causal, N))
            out += [f"{c['kernel_ratio']:.2f}×" if c and c["kernel_ratio"] else "n/a",
                    f"{c['ratio'][0]:.2f}× ({c['ratio'][1]:.2f}–{c['ratio'][2]:.2f})" if c and c["ratio"] else "n/a"]
        lines.append("| " + " | ".join([cell] + out) + " |")
    return "\n".join(lines)


EXPLAIN = ("TFLOP/s: median of the rounds [min-max]; ours / peer: the speed ratio (the peer's time over ours) "
           "of round k against round k, median [min-max]; at kernel level: the same from the kernel times of "
           "the first round (the GPU's own time of a call's work, without the host); events over kernels: how "
           "much longer each side's event time was than its kernel time in that round; GPU ops a call: "
           "kernels, memsets and copies of one call, ours / the peer's.")


def read(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="+")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="a Markdown table instead of text")
    form.add_argument("--compact", action="store_true", help="a short line a cell and peer")
    form.add_argument("--brief", action="store_true", help="a line a stage, variant and peer, over its cells")
    form.add_argument("--grid", nargs=2, metavar=("OURS", "PEER"),
                      help="a Markdown grid of one variant of ours against one peer, in the peer's faster layout")
    p.add_argument("--stage", default="", help="only the stages whose name starts with this")
    args = p.parse_args()
    comparisons = [c for c in compare(read(args.csv)) if c["stage"].startswith(args.stage)]
    if not comparisons:
        print("fairness.py: no cell with rows of ours and of a peer timed on a GPU")
        return 0
    if args.grid:
        print(grid_table(comparisons, *args.grid))
        print()
        print(f"({args.grid[0]} against {args.grid[1]} in its faster layout, cell by cell: the peer's time over ours "
              "at kernel level, first round; by events, round k against round k, median (min–max))")
    elif args.brief:
        print(brief_lines(comparisons))
    elif args.compact:
        print(compact_lines(comparisons))
    else:
        print(markdown_table(comparisons) if args.markdown else text_table(comparisons))
        print()
        print(EXPLAIN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
