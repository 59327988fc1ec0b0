#!/usr/bin/env python3
"""The result tables of a GPU's results page (docs/results/<gpu>/results.md), drawn from its
results.csv, so that they are generated rather than typed (scripts/check_generated.py keeps them
in step).

    python3 scripts/results_tables.py docs/results/h100/results.csv --table matmul|softmax

matmul: stages 01-02 at their largest size against cuBLAS SGEMM in the same run; softmax: stages
03-04 over a 512 MiB fp32 matrix against a device-to-device copy of it in the same run.
Standard library only."""
import argparse
import csv
import sys


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def one(rows, stage, variant, **shape):
    want = {k: str(v) for k, v in shape.items()}
    found = [r for r in rows if r["stage"] == stage and r["variant"] == variant and r["dtype"] == "fp32"
             and all(dict(i.split("=", 1) for i in r["shape"].split()).get(k) == v for k, v in want.items())]
    if len(found) != 1:
        sys.exit(f"results_tables.py: {len(found)} rows for {stage} {variant} {want}")
    return {k: (float(v) if v not in ("", None) and k not in ("stage", "variant", "device", "dtype", "shape") else v)
            for k, v in found[0].items()}


def sig3(x):
    """Three significant digits, as the pages print rates and sizes (0.32, 2.92, 43.0, 344)."""
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if x < 1 else f"{x:#.3g}".rstrip(".")


def size(b):
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= scale:
            return f"{sig3(b / scale)} {unit}"
    return f"{b:.0f} B"


def l2(r):
    return r["l2_read_bytes"] + r["l2_write_bytes"]


def dram(r):
    return r["dram_read_bytes"] + r["dram_write_bytes"]


def matmul(rows):
    out = ["| stage | variant | n | ms | TFLOP/s | × cuBLAS | SM↔L2 bytes: model | measured | DRAM bytes |",
           "|---|---|---|---|---|---|---|---|---|"]
    for stage, variant, n in (("01", "uncoalesced", 4096), ("01", "coalesced", 4096), ("02", "smem_tiled", 8192),
                              ("02", "register_blocked", 8192), ("02", "cublas", 8192)):
        full = "01_naive_matmul" if stage == "01" else "02_tiled_matmul"
        r = one(rows, full, variant, M=n, N=n, K=n)
        cub = one(rows, "02_tiled_matmul", "cublas", M=n, N=n, K=n)
        name = "cuBLAS SGEMM" if variant == "cublas" else variant
        model = "–" if variant == "cublas" else size(r["io_model_bytes"])
        out.append(f"| {stage} | {name} | {n} | {r['ms']:.1f} | {sig3(r['tflops'])} | {r['tflops'] / cub['tflops']:.2f} | "
                   f"{model} | {size(l2(r))} | {size(dram(r))} |")
    return out


def softmax(rows):
    out = ["| stage | variant | passes | ms | GB/s | × copy's GB/s | SM↔L2 bytes: model | measured | DRAM bytes |",
           "|---|---|---|---|---|---|---|---|---|"]
    for stage, variant, name, passes, C in (
            ("03", "naive", "naive", "2 reads + 1 write", 1048576), ("03", "safe", "safe", "3 reads + 1 write", 1048576),
            ("04", "online", "online", "2 reads + 1 write", 1048576),
            ("04", "on_chip", "on_chip (C = 4096)", "1 read + 1 write", 4096),
            ("04", "pytorch_softmax", "PyTorch softmax", "–", 1048576)):
        full = "03_safe_softmax" if stage == "03" else "04_online_softmax"
        r, copy = one(rows, full, variant, C=C), one(rows, full, "copy", C=C)
        bytes_ = ("– | – | –" if variant == "pytorch_softmax" else
                  f"{size(r['io_model_bytes'])} | {size(l2(r))} | {size(dram(r))}")
        out.append(f"| {stage} | {name} | {passes} | {r['ms']:.3f} | {r['gbps']:.0f} | {r['gbps'] / copy['gbps']:.2f} | {bytes_} |")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--table", choices=["matmul", "softmax"], required=True)
    a = p.parse_args()
    print("\n".join({"matmul": matmul, "softmax": softmax}[a.table](rows_of(a.csv))))


if __name__ == "__main__":
    main()
