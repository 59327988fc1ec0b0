#!/usr/bin/env python3
"""The course's climb as a table, from a committed run: each stage's kernels and the peers at one cell
of attention forward, TFLOP/s and the bytes read from DRAM a head (measured).
Usage: climb_table.py results.csv   (Python's standard library only; the figure: scripts/figures/climb.py)"""
import csv, sys

CELL = {"N": "4096", "d": "64", "causal": "0"}
ROWS = [("05_flash_v1", "standard", "05", "standard attention (S, P in DRAM)", "fp32"),
        ("05_flash_v1", "flash_v1", "05", "FlashAttention-1", "fp32"),
        ("06_flash_v2", "flash_v2", "06", "FlashAttention-2", "fp32"),
        ("06_flash_v2", "mma", "06", "rung 1: tensor cores (mma.sync)", "fp16"),
        ("06_flash_v2", "lazy_rescale", "06", "last rung", "fp16"),
        ("08_flash_v3", "wgmma", "08", "rung 1: wgmma", "fp16"),
        ("08_flash_v3", "tuned", "08", "last rung", "fp16"),
        ("09_flash_v3_fp8", "fp8_per_tensor", "09", "FP8 (e4m3, rung 2)", "e4m3"),
        ("05_flash_v1", "pytorch_math", "peer", "PyTorch SDPA math", "fp32"),
        ("05_flash_v1", "pytorch_efficient", "peer", "PyTorch SDPA mem-efficient", "fp32"),
        ("08_flash_v3", "pytorch_flash", "peer", "FlashAttention-2 (SDPA flash)", "fp16"),
        ("08_flash_v3", "pytorch_cudnn", "peer", "cuDNN (SDPA)", "fp16")]

found = {}
for r in csv.DictReader(open(sys.argv[1])):
    f = dict(x.split("=") for x in r["shape"].split() if "=" in x)
    if all(f.get(k) == v for k, v in CELL.items()) and r["tflops"] and r["round"] in ("", "1"):
        found.setdefault((r["stage"], r["variant"]), (r, f))
device = next(iter(found.values()))[0]["device"]
print(f"| stage | kernel | inputs | TFLOP/s | MiB read from DRAM a head |")
print("|---|---|---|---|---|")
for stage, variant, label, what, dtype in ROWS:
    if (stage, variant) not in found:
        sys.exit(f"{sys.argv[1]}: no row of {stage} {variant} at {CELL}")
    r, f = found[(stage, variant)]
    heads = int(f["B"]) * int(f["H"])
    dram = f"{float(r['dram_read_bytes']) / heads / 2**20:.3g}" if r["dram_read_bytes"] else "–"
    print(f"| {label} | {what} | {dtype} | {float(r['tflops']):.0f} | {dram} |")
print(f"\n({device}; attention forward, d = 64, N = 4096, not causal, B·N = 16384 in 16 bits and 32768 in fp32)")
