#!/usr/bin/env python3
"""Peer: PyTorch's softmax on the same GPU, timed the course's way, written in the course's CSV.

    python3 scripts/peers/torch_softmax.py --csv results.csv --cols 1024,4096 --matrix-mib 512

For each row length C: X of R × C fp32 (R = MiB / (4 C)), logits uniform in [-4, 8); the median of
20 timed runs of torch.softmax(X, dim=-1) with CUDA events, each after reading a buffer three times
the L2 (as the course's timer does: a read leaves no dirty lines behind). The model bytes are the
least any softmax can move: X read once, Y written once. Rows: stage 04_online_softmax, variant
pytorch_softmax. Exits 0 with a message when PyTorch or a GPU is missing.
"""
import argparse
import csv
import os
import statistics
import sys

COLUMNS = ["stage", "variant", "device", "dtype", "shape", "size", "flops", "ms", "tflops", "gbps",
           "io_model_bytes", "io_counted_bytes", "dram_read_bytes", "dram_write_bytes",
           "l2_read_bytes", "l2_write_bytes", "peak_mem_bytes", "max_rel_err"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True)
    p.add_argument("--cols", default="256,1024,4096,16384,65536,262144,1048576")
    p.add_argument("--matrix-mib", type=float, default=512.0)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_softmax.py: PyTorch is not installed; peer skipped")
        return 0
    if not torch.cuda.is_available():
        print("torch_softmax.py: no CUDA device; peer skipped")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.zeros(max(3 * l2, 64 << 20) // 4, dtype=torch.float32, device=dev)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    new_file = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
    rows = []
    for C in [int(c) for c in args.cols.split(",")]:
        R = max(1, int(args.matrix_mib * 1048576 // (4 * C)))
        x = torch.rand(R, C, device=dev, dtype=torch.float32) * 12.0 - 4.0
        y = torch.softmax(x, dim=-1)
        ref = torch.softmax(x.double(), dim=-1)
        scale = torch.maximum(ref.abs(), ref.pow(2).mean().sqrt())
        err = ((y.double() - ref).abs() / scale).max().item()
        times = []
        for i in range(3 + args.reps):
            flush.sum()
            start.record()
            y = torch.softmax(x, dim=-1)
            stop.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(stop))
        ms = statistics.median(times)
        model = 8.0 * R * C
        rows.append(dict(stage="04_online_softmax", variant="pytorch_softmax", device=name, dtype="fp32",
                         shape=f"R={R} C={C}", size=C, ms=f"{ms:.6g}", gbps=f"{model / (ms * 1e6):.6g}",
                         io_model_bytes=f"{model:.12g}", max_rel_err=f"{err:.3g}"))
        print(f"pytorch_softmax R={R} C={C}: {ms:.4f} ms, {model / (ms * 1e6):.0f} GB/s, max rel err {err:.1e}")
        del x, y, ref, scale
    with open(args.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new_file:
            w.writeheader()
        for r in rows:
            w.writerow(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
