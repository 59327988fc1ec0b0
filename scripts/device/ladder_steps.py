#!/usr/bin/env python3
"""Each rung's gain over the rung before, from a stage program's CSV: the geometric mean over the cells
(dtype, d, causal, N) with the range, for all cells and by d. Medians of the rounds per cell.
Usage: ladder_steps.py bench.csv rung1,rung2,...   (a markdown table on stdout)
       ladder_steps.py bench.csv rung1,rung2,... --against BASE   (each rung's speed over BASE's, cell by cell)
       --dtype T (either form) keeps the rows of one dtype."""
import collections, csv, math, statistics, sys

args = sys.argv[1:]
options = {args[k]: args[k + 1] for k in range(2, len(args) - 1, 2) if args[k].startswith("--")}
if len(args) < 2 or set(options) - {"--against", "--dtype"}:
    sys.exit(__doc__)
path, order = args[0], args[1].split(",")
against, only = options.get("--against"), options.get("--dtype")
ms = collections.defaultdict(list)  # (variant, dtype, d, causal, N) -> ms of each round
for r in csv.DictReader(open(path)):
    if not r["ms"] or (only and r["dtype"] != only):
        continue
    f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
    ms[(r["variant"], r["dtype"], int(f["d"]), f["causal"], int(f["N"]))].append(float(r["ms"]))
cells = sorted({k[1:] for k in ms})
if not cells:
    sys.exit(f"{path}: no timed rows")


def text(g):
    return f"{math.exp(statistics.mean(math.log(x) for x in g)):.2f}× ({min(g):.2f}–{max(g):.2f})" if g else "–"


if against:
    dtypes = len({c[0] for c in cells}) > 1

    def name(c):
        t, d, causal, N = c
        return f"{t + ', ' if dtypes else ''}d = {d}{', causal' if causal == '1' else ''}, N = {N}"
    print("| rung | " + " | ".join(name(c) for c in cells) + " |")
    print("|---" * (len(cells) + 1) + "|")
    for v in order:
        row = [f"{statistics.median(ms[(against,) + c]) / statistics.median(ms[(v,) + c]):.2f}×"
               if ms.get((v,) + c) and ms.get((against,) + c) else "" for c in cells]
        print(f"| `{v}` | " + " | ".join(row) + " |")
    print(f"\n({against}'s time / the rung's, medians of the rounds)")
    sys.exit(0)
print("| step | all cells | d = 64 | d = 128 |")
print("|---|---|---|---|")
for a, b in zip(order, order[1:]):
    gains = {c: statistics.median(ms[(a,) + c]) / statistics.median(ms[(b,) + c]) for c in cells
             if ms.get((a,) + c) and ms.get((b,) + c)}
    by = lambda d: [g for c, g in gains.items() if c[1] == d]  # noqa: E731
    print(f"| `{a}` → `{b}` | {text(list(gains.values()))} | {text(by(64))} | {text(by(128))} |")
print(f"\n({len(cells)} cells; time of the rung before / time of the rung, medians of the rounds)")
