#!/usr/bin/env python3
"""Where standard attention's time goes: its kernels one by one, from Nsight Compute.

    standard_breakdown.py --out breakdown.csv N:CAUSAL:NCU_CSV ...

Each NCU_CSV is `ncu --csv --print-units base --cache-control none --metrics gpu__time_duration.sum,
dram__bytes_read.sum,dram__bytes_write.sum --log-file NCU_CSV 05_flash_v1 --variants standard,flash_v1
--reps 1 --warmup 0 ...` (CAUSAL: 0 or 1). A run of standard attention is the kernels from one
transpose_scale to the second register_blocked after it; the program launches it more than once
(checked, then timed), and each step's median over those runs is written, with flash_v1's for
comparison. Prints a table for the chapter.
"""
import argparse
import csv
import statistics
import sys

STEP_OF_KERNEL = {  # kernel name (without namespace or template) -> step; matmuls by order
    "transpose_scale": "transpose",
    "causal_mask": "mask",
    "safe_max": "softmax",
    "safe_sum_exp": "softmax",
    "safe_normalize": "softmax",
    "flash_v1": "flash_v1",
}


def short_name(kernel):
    name = kernel.split("(")[0].split("<")[0].strip()
    return name.split("::")[-1].replace("void ", "")


def launches(path):
    """[(kernel, {metric: value})] in launch order."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    order, values = [], {}
    for row in csv.DictReader(lines):
        key = row["ID"]
        if key not in values:
            values[key] = {}
            order.append((key, short_name(row["Kernel Name"])))
        values[key][row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    return [(name, values[key]) for key, name in order]


def steps(path):
    """{step: [per-run {ms, dram}]}: the standard runs split at transpose_scale."""
    runs, flash = [], []
    current = None
    for name, m in launches(path):
        sample = {"ms": m["gpu__time_duration.sum"] / 1e6,
                  "dram": m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]}
        if name == "flash_v1":
            flash.append(sample)
            continue
        if name == "transpose_scale":
            current = {}
            runs.append(current)
        if current is None:
            continue  # not part of a standard run (e.g. the L2 flush)
        step = STEP_OF_KERNEL.get(name)
        if name == "register_blocked":
            step = "S = Q·Kt" if "S = Q·Kt" not in current else "O = P·V"
        if step is None:
            continue
        acc = current.setdefault(step, {"ms": 0.0, "dram": 0.0})
        acc["ms"] += sample["ms"]
        acc["dram"] += sample["dram"]
    out = {}
    for run in runs:
        for step, v in run.items():
            out.setdefault(step, []).append(v)
    if flash:
        out["flash_v1"] = flash
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("specs", nargs="+", help="N:CAUSAL:NCU_CSV")
    args = p.parse_args()
    rows = []
    for spec in args.specs:
        n, causal, path = spec.split(":", 2)
        for step, samples in steps(path).items():
            ms = statistics.median(s["ms"] for s in samples)
            dram = statistics.median(s["dram"] for s in samples)
            rows.append({"N": int(n), "causal": int(causal), "step": step, "ms": round(ms, 4),
                         "dram_bytes": int(dram), "dram_gbps": round(dram / ms / 1e6, 1) if ms > 0 else 0.0,
                         "runs": len(samples)})
    if not rows:
        sys.exit("no kernels found in " + " ".join(args.specs))
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    order = ["transpose", "S = Q·Kt", "mask", "softmax", "O = P·V", "flash_v1"]
    print("| N | causal | " + " | ".join(order) + " | standard, sum | softmax share |")
    print("|---|---|" + "---|" * (len(order) + 2))
    for (n, causal) in sorted({(r["N"], r["causal"]) for r in rows}):
        got = {r["step"]: r for r in rows if r["N"] == n and r["causal"] == causal}
        total = sum(r["ms"] for s, r in got.items() if s != "flash_v1")
        cells = []
        for s in order:
            r = got.get(s)
            if r is None:
                cells.append("–")
            elif s in ("softmax", "mask", "transpose"):
                cells.append(f"{r['ms']:.3f} ms ({r['dram_gbps']:.0f} GB/s)")
            else:
                cells.append(f"{r['ms']:.3f} ms")
        share = got["softmax"]["ms"] / total if "softmax" in got and total else 0.0
        print(f"| {n} | {causal} | " + " | ".join(cells) + f" | {total:.3f} ms | {share:.0%} |")


if __name__ == "__main__":
    main()
