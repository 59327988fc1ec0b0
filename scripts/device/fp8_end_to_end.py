#!/usr/bin/env python3
"""Stage 09's quantisation against a copy, and FP8 end to end against its bound, from one run's CSV.

For each cell (d, causal, N): the copy's rate (bytes read and written over its median time); each
quantisation scheme's minimum bytes (09_flash_v3_fp8/algorithm.cpp, quantize_min_bytes: Q, K, V read
once, twice per tensor, V once more when centred; e4m3 and the descales written once) over its median
time, as a % of the copy's rate; and for each FP8 attention row, with its quantisation (the scheme it
was quantised by: V centred for the wide rungs, rungs 3-7 at d = 128), the end-to-end time, stage 08's
median over it, and its bound: the attention's time plus the scheme's minimum bytes at the copy's rate.
Usage: fp8_end_to_end.py run.csv
"""
import csv
import statistics as st
import sys
from collections import defaultdict

WIDE = {"wide", "wide_exact_max", "tile_overlap", "tile_start", "epilogue", "lin"}  # key blocks of 256 at d = 128


def fields(shape):
    return dict(x.split("=") for x in shape.split() if "=" in x)


def min_bytes(f, scheme, centred):
    """quantize_min_bytes (algorithm.cpp), for the 16-bit inputs."""
    B, H, N, d = (int(f[k]) for k in ("B", "H", "N", "d"))
    n, heads = B * H * N * d, B * H
    passes = 2 if scheme.startswith("per_tensor") else 1
    blocks = heads * ((N + 127) // 128)
    padded = (N + 31) // 32 * 32
    return 3 * 2 * n * passes + (2 * n if centred else 0) + 2 * n + heads * d * padded + 3 * 4 * blocks


def main(path):
    rows = [r for r in csv.DictReader(open(path)) if r["ms"]]
    cells = defaultdict(lambda: defaultdict(list))
    shapes = {}
    for r in rows:
        f = fields(r["shape"])
        key = (int(f["d"]), f["causal"], int(f["N"]), int(f["B"]), int(f["H"]), r["dtype"])
        cells[key][r["variant"]].append(float(r["ms"]))
        shapes[key] = f
    for key in sorted(cells):
        d, causal, N, _, _, dtype = key
        by = {v: st.median(ms) for v, ms in cells[key].items()}
        spread = {v: (max(ms) - min(ms)) / st.median(ms) * 100 for v, ms in cells[key].items()}
        f = shapes[key]
        print(f"d={d} causal={causal} N={N} (B={f['B']} H={f['H']}), {dtype}; medians over rounds, spread (max-min)/median")
        if "copy" not in by:
            print("  no copy row: no rates")
            continue
        copy_bytes = 2 * 3 * 2 * int(f["B"]) * int(f["H"]) * N * d
        rate = copy_bytes / (by["copy"] * 1e-3)
        print(f"  copy                           {by['copy']:.4f} ms ({spread['copy']:.1f}%)  {rate / 1e9:7.0f} GB/s")
        for v in sorted(by):
            if not v.startswith("quant"):
                continue
            centred = v.startswith("quant_centred")
            scheme = v.split(".", 1)[1]
            b = min_bytes(f, scheme, centred)
            print(f"  {v:30s} {by[v]:.4f} ms ({spread[v]:.1f}%)  {b / by[v] / 1e6:7.0f} GB/s on {b / 1e6:.0f} MB minimum: "
                  f"{b / by[v] * 1e3 / rate * 100:5.1f}% of the copy")
        base = by.get("08_tuned")
        for v in sorted(by):
            rung, _, scheme = v.partition(".")
            if not scheme or rung.startswith("quant") or rung == "08_tuned":
                continue
            scheme = scheme.split("_hg")[0]
            centred = rung in WIDE and d == 128
            q = by.get(f"quant_centred.{scheme}_centred" if centred else f"quant.{scheme}")
            if q is None:
                print(f"  {v:30s} {by[v]:.4f} ms; no quantisation row for its scheme")
                continue
            total = by[v] + q
            bound = by[v] + min_bytes(f, scheme, centred) / rate * 1e3
            line = f"  {v:30s} attention {by[v]:.4f} + quantisation {q:.4f} = {total:.4f} ms, bound {bound:.4f} ms " \
                   f"(end to end / bound {total / bound:.3f})"
            if base:
                line += f"; 08_tuned / it: {base / by[v]:.2f} alone, {base / total:.2f} end to end, {base / bound:.2f} bound"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1])
