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
import sys

from peer_common import Timer, append_csv, max_rel_err


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
    timer = Timer(torch)
    rows = []
    for C in [int(c) for c in args.cols.split(",")]:
        R = max(1, int(args.matrix_mib * 1048576 // (4 * C)))
        x = torch.rand(R, C, device=dev, dtype=torch.float32) * 12.0 - 4.0
        y = torch.softmax(x, dim=-1)
        ref = torch.softmax(x.double(), dim=-1)
        err = max_rel_err(y, ref)
        ms = timer.median_ms(lambda: torch.softmax(x, dim=-1), args.reps)
        model = 8.0 * R * C
        rows.append(dict(stage="04_online_softmax", variant="pytorch_softmax", device=name, dtype="fp32",
                         shape=f"R={R} C={C}", size=C, ms=f"{ms:.6g}", gbps=f"{model / (ms * 1e6):.6g}",
                         io_model_bytes=f"{model:.12g}", max_rel_err=f"{err:.3g}"))
        print(f"pytorch_softmax R={R} C={C}: {ms:.4f} ms, {model / (ms * 1e6):.0f} GB/s, max rel err {err:.1e}")
        del x, y, ref
    append_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
