#!/usr/bin/env python3
"""Cross-checks the in-process counters (CUPTI range profiler, the CSV's measured columns) against
Nsight Compute on the same kernel and shape.

    compare_ncu.py --csv results.csv --out comparison.csv NCU_CSV:STAGE:VARIANT:SHAPE ...

NCU_CSV is `ncu --csv --print-units base --metrics <the four> --log-file NCU_CSV`
of one launch; SHAPE is the CSV's shape column, or `largest` for the row with the largest size.
"""
import argparse
import csv
import sys

METRICS = [  # (ncu metric, CSV column, scale to bytes); the same four as common/counters.cpp
    ("dram__bytes_read.sum", "dram_read_bytes", 1.0),
    ("dram__bytes_write.sum", "dram_write_bytes", 1.0),
    ("l1tex__m_xbar2l1tex_read_bytes.sum", "l2_read_bytes", 1.0),
    ("l1tex__m_l1tex2xbar_write_bytes.sum", "l2_write_bytes", 1.0),
]


def read_ncu(path):
    values = {}
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # skip ==PROF== lines
    for row in csv.DictReader(lines):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if name:
            values[name] = float(value.replace(",", ""))
    return values


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("specs", nargs="+")
    args = p.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["device"] != "cpu"]
    out_rows, worst = [], 0.0
    print(f"{'kernel':<34} {'metric':<18} {'ncu':>16} {'in-process':>16} {'ratio':>7}")
    for spec in args.specs:
        path, stage, variant, shape = spec.split(":", 3)
        mine = [r for r in rows if r["stage"] == stage and r["variant"] == variant]
        if shape == "largest":
            mine = sorted(mine, key=lambda r: float(r["size"] or 0))[-1:]
        else:
            mine = [r for r in mine if r["shape"] == shape]
        if not mine:
            print(f"{stage} {variant} {shape}: no measured row in {args.csv}", file=sys.stderr)
            continue
        try:
            ncu = read_ncu(path)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            continue
        row = mine[-1]
        for metric, column, scale in METRICS:
            if metric not in ncu or not row[column]:
                print(f"{stage} {variant}: {metric} missing", file=sys.stderr)
                continue
            a, b = ncu[metric] * scale, float(row[column])
            ratio = b / a if a else float("nan")
            worst = max(worst, abs(ratio - 1.0))
            label = f"{stage} {variant} [{row['shape']}]"
            print(f"{label[:34]:<34} {column:<18} {a:>16.0f} {b:>16.0f} {ratio:>7.4f}")
            out_rows.append(dict(stage=stage, variant=variant, shape=row["shape"], device=row["device"],
                                 metric=column, ncu_bytes=f"{a:.0f}", in_process_bytes=f"{b:.0f}",
                                 ratio=f"{ratio:.5f}"))
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["stage", "variant", "shape", "device", "metric", "ncu_bytes",
                                          "in_process_bytes", "ratio"])
        w.writeheader()
        w.writerows(out_rows)
    print(f"largest |in-process / ncu - 1| = {worst:.4f} over {len(out_rows)} comparisons")


if __name__ == "__main__":
    main()
