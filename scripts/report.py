#!/usr/bin/env python3
"""Turns the course's CSV (one schema for every stage) into its figures and a summary table.

    python3 scripts/report.py results.csv [more.csv ...] --out DIR

Writes DIR/<family>_io.png (bytes moved vs problem size, log-log: the model as lines, the CPU
count and the GPU's counters as markers), DIR/<family>_speed.png (speed vs size, with the peer the
reader would otherwise use), DIR/io_probe.png (the check of the counters), the attention figures
(attention_*.png, flash_v1_fig2.png; stage 06: flash_v2_ladder*.png, flash_v2_vs_fa2.png,
flash_v2_io.png; stage 07: backward_ladder*.png, backward_vs_fa2.png, backward_fig2.png; stage 08:
flash_v3_ladder*.png, flash_v3_vs_cudnn.png, flash_v3_io.png; stage 09: flash_v3_fp8.png,
flash_v3_fp8_io.png; without a GPU, attention_counted_io.png: stages 05-08's model and CPU count)
and DIR/summary.md (with stage 06's, 07's, 08's and 09's tables, and why a figure is missing), and prints the summary. Several rows of one
problem (rounds) count as their median; stage 08's table shows their min-max too. Rows written in
rounds (the round column) or with a kernel time (kernel_ms) add a table of ours against each peer,
cell by cell, round k against round k, with the kernel-level check (scripts/fairness.py). Its
figures that these rows do not give (an earlier run's) are removed from DIR. Without matplotlib it
writes the summary. The attention stages' figures and tables are report_attention.py's, what both
use report_common.py's.
"""
import argparse
import os
import sys
from collections import OrderedDict

import fairness  # beside this script
from report_attention import (backward_tables, figure_notes, flash_v2_tables, flash_v3_tables, fp8_tables,
    plot_attention, plot_backward, plot_counted_io, plot_flash_v2, plot_flash_v3, plot_fp8)
from report_common import (FIGURES, add, device_name, fmt, fmt_bytes, merged, plt, read_rows, save_figure,
    series, variants_of)

# Stages plotted together, and the peer each family is compared with (measured in the same run).
# speed: the column plotted against size (tflops for compute-bound stages, gbps for memory-bound).
# exclude: variants of these stages that belong to another family.
FAMILIES = OrderedDict(
    matmul=dict(
        stages=["01_naive_matmul", "02_tiled_matmul"],
        peer=("02_tiled_matmul", "cublas"),
        xlabel="matrix side n (M = N = K = n)",
        title="fp32 matmul",
        speed="tflops",
    ),
    softmax=dict(
        stages=["03_safe_softmax", "04_online_softmax"],
        peer=("04_online_softmax", "copy"),
        xlabel="row length C (the matrix is the same size at every C)",
        title="fp32 row softmax",
        speed="gbps",
        exclude=["attention_row"],
    ),
    attention_row=dict(
        stages=["04_online_softmax"],
        only=["attention_row"],
        peer=None,
        xlabel="keys N",
        title="single-query attention (one pass over K, V)",
        speed="tflops",
    ),
    # Several shapes share a sequence length here (sweeps of B·H, d, causal, M), so the generic
    # figures would mix them: plot_attention draws this family's figures; the summary lists it.
    attention=dict(
        stages=["05_flash_v1"],
        peer=None,
        xlabel="sequence length N",
        title="attention",
        speed="tflops",
        generic_plots=False,
    ),
    # fp32 FA-1 and FA-2, the tensor-core ladder in fp16 and bf16 and their peers: plot_flash_v2
    # draws the figures; the summary lists each variant once per dtype.
    flash_v2=dict(
        stages=["06_flash_v2"],
        peer=None,
        xlabel="sequence length N",
        title="FlashAttention-2",
        speed="tflops",
        generic_plots=False,
    ),
    # The backward pass: plot_backward draws its figures (the ladder, % of FA-2, Fig. 2).
    backward=dict(
        stages=["07_backward"],
        peer=None,
        xlabel="sequence length N",
        title="attention backward",
        speed="tflops",
        generic_plots=False,
    ),
    # FlashAttention-3 on Hopper: plot_flash_v3 draws its figures (the ladder, tuned against cuDNN and
    # FA-2, IO three ways).
    flash_v3=dict(
        stages=["08_flash_v3"],
        peer=None,
        xlabel="sequence length N",
        title="FlashAttention-3",
        speed="tflops",
        generic_plots=False,
    ),
    # FP8 attention on Hopper: plot_fp8 draws its figures (speed against stage 08, the bytes moved).
    flash_v3_fp8=dict(
        stages=["09_flash_v3_fp8"],
        peer=None,
        xlabel="sequence length N",
        title="FP8 attention",
        speed="tflops",
        generic_plots=False,
    ),
)


def plot_io(records, family, spec, out):
    variants = variants_of(records, spec)
    if not variants or not spec.get("generic_plots", True):
        return None
    for r in records:
        r["l2_total"] = add(r.get("l2_read_bytes"), r.get("l2_write_bytes"))
        r["dram_total"] = add(r.get("dram_read_bytes"), r.get("dram_write_bytes"))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (stage, variant) in enumerate(variants):
        c = colors[i % len(colors)]
        label = f"{stage[:2]} {variant}"
        x, y = series(records, stage, variant, "io_model_bytes")
        if x:
            ax.plot(x, y, "-", color=c, label=f"{label}: model")
        x, y = series(records, stage, variant, "io_counted_bytes")
        if x:
            ax.plot(x, y, "x", color=c, markersize=9, label=f"{label}: counted (CPU)")
        x, y = series(records, stage, variant, "l2_total")
        if x:
            ax.plot(x, y, "o", color=c, label=f"{label}: measured SM↔L2")
        x, y = series(records, stage, variant, "dram_total")
        if x:
            ax.plot(x, y, "s", color=c, fillstyle="none", label=f"{label}: measured DRAM")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(spec["xlabel"])
    ax.set_ylabel("bytes read + written")
    ax.set_title(f"{spec['title']}: memory traffic — {device_name(records)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    path = save_figure(fig, out, f"{family}_io.png")
    return path


def plot_speed(records, family, spec, out):
    metric = spec["speed"]
    variants = [v for v in variants_of(records, spec) if series(records, v[0], v[1], metric)[0]]
    if not variants or not spec.get("generic_plots", True):
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (stage, variant) in enumerate(variants):
        x, y = series(records, stage, variant, metric)
        peer = (stage, variant) == spec["peer"]
        ax.plot(x, y, "--" if peer else "-o", color="black" if peer else colors[i % len(colors)],
                label=f"{stage[:2]} {variant}" + (" (peer)" if peer else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(spec["xlabel"])
    ax.set_ylabel("TFLOP/s" if metric == "tflops" else "GB/s (model bytes / time)")
    ax.set_title(f"{spec['title']}: speed — {device_name(records)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = save_figure(fig, out, f"{family}_speed.png")
    return path


def plot_io_probe(records, out):
    probe = sorted((r for r in records if r["stage"] == "io_probe" and r.get("l2_read_bytes")),
                   key=lambda r: r["size"])
    if not probe:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [r["size"] for r in probe]
    for key, style in [("dram_read_bytes", "o-"), ("dram_write_bytes", "s-"),
                       ("l2_read_bytes", "^--"), ("l2_write_bytes", "v--")]:
        ax.plot(x, [r[key] / r["size"] for r in probe], style, label=key.replace("_bytes", ""))
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes copied")
    ax.set_ylabel("measured / bytes copied")
    ax.set_title(f"io_probe: a copy's measured traffic — {device_name(probe)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = save_figure(fig, out, "io_probe.png")
    return path


def largest(mine):
    """The record with the largest size that was timed; without a GPU, that was counted on the CPU."""
    timed = [r for r in mine if r.get("ms") is not None]
    counted = [r for r in mine if r.get("io_counted_bytes") is not None]
    return max(timed or counted or mine, key=lambda r: (r.get("size") or 0, r.get("flops") or 0))


def summary_row(name, best, peer, metric):
    ratio = (best[metric] / peer[metric]) if peer and best.get(metric) else None
    l2 = add(best.get("l2_read_bytes"), best.get("l2_write_bytes"))
    dram = add(best.get("dram_read_bytes"), best.get("dram_write_bytes"))
    model = best.get("io_model_bytes")
    return "| " + " | ".join([
        best["stage"], name, best["shape"], fmt(best.get("ms"), ".3f"),
        fmt(best.get("tflops"), ".2f"), fmt(best.get("gbps"), ".0f"), fmt(ratio, ".2f"),
        fmt_bytes(model), fmt_bytes(best.get("io_counted_bytes")), fmt_bytes(l2),
        fmt(l2 / model if l2 and model else None, ".3f"),
        fmt_bytes(dram), fmt(dram / model if dram and model else None, ".3f"),
        fmt(best.get("max_rel_err"), ".1e")]) + " |"


def fairness_section(rows):
    """Ours against each peer, round k against round k, with the kernel-level check: for rows written
    in rounds or with a kernel time (older CSVs have neither, and get no such table)."""
    rounds = any(str(r.get("round") or "") not in ("", "1") for r in rows)
    if not rounds and not any(r.get("kernel_ms") is not None for r in rows):
        return ""
    comparisons = fairness.compare(rows)
    if not comparisons:
        return ""
    return ("\n### Ours against the peers, round k against round k\n\n" + fairness.markdown_table(comparisons) +
            "\n\n" + fairness.EXPLAIN + "\n")


def summary(records):
    """Per family, variant and dtype, the largest size that was timed (or counted, without a GPU);
    the dtype goes next to the variant in families that have several."""
    lines = [f"Device: {device_name(records)}", "",
             "| stage | variant | shape | ms | TFLOP/s | GB/s | × peer | model | counted (CPU) | measured SM↔L2 "
             "| SM↔L2 / model | DRAM r+w | DRAM / model | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for family, spec in FAMILIES.items():
        metric = spec["speed"]
        peers = {(r["shape"], r["dtype"]): r for r in records
                 if spec["peer"] and (r["stage"], r["variant"]) == spec["peer"] and r.get(metric)}
        variants = variants_of(records, spec)
        several = len({r["dtype"] for r in records if (r["stage"], r["variant"]) in variants}) > 1
        for stage, variant in variants:
            mine = [r for r in records if r["stage"] == stage and r["variant"] == variant]
            for dtype in OrderedDict.fromkeys(r["dtype"] for r in mine):
                best = largest([r for r in mine if r["dtype"] == dtype])
                name = f"{variant} ({dtype})" if several and dtype else variant
                lines.append(summary_row(name, best, peers.get((best["shape"], dtype)), metric))
    probe = [r for r in records if r["stage"] == "io_probe"]
    if probe:
        lines += ["", "| io_probe: bytes copied | GB/s | DRAM read | DRAM write | L2 read | L2 write |",
                  "|---|---|---|---|---|---|"]
        for r in sorted(probe, key=lambda r: r["size"]):
            ratios = [fmt(r[k] / r["size"] if r.get(k) is not None else None, ".3f")
                      for k in ("dram_read_bytes", "dram_write_bytes", "l2_read_bytes", "l2_write_bytes")]
            lines.append(f"| {fmt_bytes(r['size'])} | {fmt(r.get('gbps'), '.0f')} | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", help="CSV files written with --csv")
    parser.add_argument("--out", default=".", help="directory for the figures and summary.md")
    args = parser.parse_args()
    for path in args.csv:
        if not os.path.exists(path):
            sys.exit(f"report.py: {path}: no such file")
    rows = read_rows(args.csv)
    records = merged(rows)
    if not records:
        sys.exit("report.py: no rows in " + ", ".join(args.csv))
    os.makedirs(args.out, exist_ok=True)
    written = []
    if plt is not None:
        for family, spec in FAMILIES.items():
            written += [plot_io(records, family, spec, args.out), plot_speed(records, family, spec, args.out)]
        written.append(plot_io_probe(records, args.out))
        written += plot_attention(records, args.out)
        written += plot_flash_v2(records, args.out)
        written += plot_backward(records, args.out)
        written += plot_flash_v3(records, args.out)
        written += plot_fp8(records, args.out)
        written.append(plot_counted_io(records, args.out))
    text = (summary(records) + flash_v2_tables(records) + backward_tables(records) + flash_v3_tables(records) +
            fp8_tables(records) + fairness_section(rows) + figure_notes(records))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    written = [os.path.basename(p) for p in written if p]
    for name in written:
        print("wrote", os.path.join(args.out, name))
    for name in FIGURES:  # an earlier run's figure that these rows do not give
        path = os.path.join(args.out, name)
        if name not in written and os.path.exists(path):
            os.remove(path)
            print("removed", path, "(not drawn from these rows)")


if __name__ == "__main__":
    main()
