#!/usr/bin/env python3
"""Turns the course's CSV (one schema for every stage) into its figures and a summary table.

    python3 scripts/report.py results.csv [more.csv ...] --out DIR

Writes DIR/<family>_io.png (bytes moved vs problem size, log-log: the model as lines, the CPU
count and the GPU's counters as markers), DIR/<family>_speed.png (speed vs size, with the peer the
reader would otherwise use), DIR/io_probe.png (the check of the counters) and DIR/summary.md, and
prints the summary.
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
)

NUMERIC = ["size", "flops", "ms", "tflops", "gbps", "io_model_bytes", "io_counted_bytes",
           "dram_read_bytes", "dram_write_bytes", "l2_read_bytes", "l2_write_bytes",
           "peak_mem_bytes", "max_rel_err"]


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for raw in csv.DictReader(f):
                row = dict(raw)
                for key in NUMERIC:
                    text = row.get(key, "")
                    row[key] = float(text) if text not in ("", None) else None
                rows.append(row)
    return rows


def merged(rows):
    """One record per (stage, variant, shape, GPU), with the CPU-only values of the same problem
    (the counted bytes) filled in; problems that only ran on the CPU keep a record of their own."""
    gpu, cpu = OrderedDict(), OrderedDict()
    for r in rows:
        problem = (r["stage"], r["variant"], r["shape"])
        on_cpu = r["device"] == "cpu"
        table, key = (cpu, problem) if on_cpu else (gpu, problem + (r["device"],))
        rec = table.setdefault(key, dict(stage=r["stage"], variant=r["variant"], shape=r["shape"],
                                         device=None if on_cpu else r["device"]))
        for k in NUMERIC:
            if r[k] is not None:
                rec[k] = r[k]
    records, covered = [], set()
    for key, rec in gpu.items():
        for k, v in cpu.get(key[:3], {}).items():
            if k in NUMERIC and rec.get(k) is None:
                rec[k] = v
        covered.add(key[:3])
        records.append(rec)
    records += [rec for key, rec in cpu.items() if key not in covered]
    devices = sorted({r["device"] for r in records if r["device"]})
    if len(devices) > 1:
        print("report.py: warning: rows from several GPUs (" + ", ".join(devices) +
              "); the figures mix them. Report one CSV per GPU.", file=sys.stderr)
    return records


def add(a, b):
    return None if a is None or b is None else a + b


def series(records, stage, variant, key):
    pts = sorted((r["size"], r.get(key)) for r in records
                 if r["stage"] == stage and r["variant"] == variant and r.get("size") is not None
                 and r.get(key) is not None)
    return [p[0] for p in pts], [p[1] for p in pts]


def device_name(records):
    names = sorted({r["device"] for r in records if r.get("device")})
    return ", ".join(names) if names else "no GPU (CPU parts only)"


def variants_of(records, spec):
    seen = OrderedDict()
    for r in records:
        if r["stage"] not in spec["stages"] or r["variant"] in spec.get("exclude", []):
            continue
        if "only" in spec and r["variant"] not in spec["only"]:
            continue
        seen[(r["stage"], r["variant"])] = True
    return list(seen)


def save_figure(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def log_axes(ax, xlabel, ylabel, title):
    """Log-log axes, x in powers of two, with a grid and a small legend."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


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


# --- attention (stage 05 on) ---------------------------------------------------------------------

ATTENTION_STYLE = OrderedDict(
    standard=dict(color="tab:red", marker="o", label="standard (S, P in memory)"),
    flash_v1=dict(color="tab:blue", marker="s", label="FlashAttention-1"),
    pytorch_math=dict(color="gray", marker="v", label="PyTorch SDPA math (peer)"),
    pytorch_efficient=dict(color="black", marker="^", label="PyTorch SDPA mem-efficient (peer)"),
)

def shape_fields(text):
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def attention_records(records, stage="05_flash_v1", **want):
    out = []
    for r in records:
        if r["stage"] != stage:
            continue
        f = shape_fields(r["shape"])
        if all(f.get(k) == str(v) for k, v in want.items()):
            out.append(dict(r, fields=f))
    return out


def default_m(recs):
    ms = [int(r["fields"]["M"]) for r in recs if r["variant"] == "flash_v1" and "M" in r["fields"]]
    return max(ms) if ms else None


def attention_series(recs, variant, key, m=None):
    pts = sorted((r["size"], r.get(key)) for r in recs if r["variant"] == variant and r.get(key) is not None
                 and (m is None or r["fields"].get("M") in (None, str(m))))
    return [p[0] for p in pts], [p[1] for p in pts]


def out_of_memory(recs, variant):
    """Sizes where the variant has a GPU row but no time: it did not fit in device memory."""
    return sorted(r["size"] for r in recs if r["variant"] == variant and r.get("device") and r.get("ms") is None)


def plot_attention(records, out):
    written = []
    sweep = attention_records(records, B=8, H=32, d=64)
    if sweep:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        for ax, causal in zip(axes, (0, 1)):
            recs = [r for r in sweep if r["fields"].get("causal") == str(causal)]
            m = default_m(recs)
            for variant, st in ATTENTION_STYLE.items():
                x, y = attention_series(recs, variant, "tflops", m)
                if x:
                    ax.plot(x, y, marker=st["marker"], color=st["color"], label=st["label"],
                            ls="--" if variant.startswith("pytorch") else "-")
                for n in out_of_memory(recs, variant):
                    ax.plot([n], [0.5], marker="x", ms=10, color=st["color"])
                    ax.annotate("out of\nmemory", (n, 0.5), textcoords="offset points", xytext=(0, 8),
                                ha="center", fontsize=7, color=st["color"])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length N (B = 8, H = 32, d = 64)")
            ax.set_title("causal" if causal else "not causal")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("TFLOP/s (4·B·H·N²·d, halved when causal)")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"fp32 attention forward: speed — {device_name(sweep)}")
        path = save_figure(fig, out, "attention_speed.png")
        written.append(path)

        recs = [r for r in sweep if r["fields"].get("causal") == "0"]
        m = default_m(recs)
        fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.8))
        for r in recs:
            r["l2_total"] = add(r.get("l2_read_bytes"), r.get("l2_write_bytes"))
            r["dram_total"] = add(r.get("dram_read_bytes"), r.get("dram_write_bytes"))
        for variant in ("standard", "flash_v1"):
            st = ATTENTION_STYLE[variant]
            x, y = attention_series(recs, variant, "io_model_bytes", m)
            ax.plot(x, y, "-", color=st["color"], label=f"{variant}: model")
            x, y = attention_series(recs, variant, "l2_total", m)
            ax.plot(x, y, "o", mfc="none", color=st["color"], label=f"{variant}: measured SM↔L2")
            x, y = attention_series(recs, variant, "dram_total", m)
            ax.plot(x, y, "x", color=st["color"], label=f"{variant}: measured DRAM")
        log_axes(ax, "sequence length N (B = 8, H = 32, d = 64, not causal)", "bytes read + written",
                 "global memory traffic")
        for variant, st in ATTENTION_STYLE.items():
            x, y = attention_series(recs, variant, "peak_mem_bytes", m)
            if x:
                mem.plot(x, y, marker=st["marker"], color=st["color"], label=st["label"],
                         ls="--" if variant.startswith("pytorch") else "-")
            for n in out_of_memory(recs, variant):
                mem.axvline(n, color=st["color"], lw=0.8, ls=":")
                mem.annotate(f"{variant}: out of memory", (n, mem.get_ylim()[0]), rotation=90, fontsize=7,
                             color=st["color"], va="bottom")
        log_axes(mem, "sequence length N", "peak device memory, bytes", "device memory: N² against N")
        fig.suptitle(f"fp32 attention forward: IO and memory — {device_name(recs)}")
        path = save_figure(fig, out, "attention_io.png")
        written.append(path)

    fig2 = attention_records(records, B=64, H=16, N=1024, d=64)
    if fig2:
        fig, (left, mid) = plt.subplots(1, 2, figsize=(12, 4.8))
        m = default_m(fig2)
        pick = {v: next((r for r in fig2 if r["variant"] == v and r["fields"].get("M") in (None, str(m))
                         and r.get("ms") is not None), None) for v in ("standard", "flash_v1")}
        labels = ["GFLOP", "SM↔L2 GB", "DRAM GB", "runtime ms"]
        width = 0.35
        for k, (variant, r) in enumerate(pick.items()):
            if r is None:
                continue
            vals = [r["flops"] / 1e9, (add(r.get("l2_read_bytes"), r.get("l2_write_bytes")) or 0) / 1e9,
                    (add(r.get("dram_read_bytes"), r.get("dram_write_bytes")) or 0) / 1e9, r["ms"]]
            xs = [i + (k - 0.5) * width for i in range(len(labels))]
            bars = left.bar(xs, vals, width, color=ATTENTION_STYLE[variant]["color"], label=variant)
            for b, v in zip(bars, vals):
                left.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        left.set_xticks(range(len(labels)))
        left.set_xticklabels(labels)
        left.set_yscale("log")
        left.set_title("B = 64, H = 16, N = 1024, d = 64 (forward)")
        left.legend(fontsize=8)
        left.text(0.30, 0.97, "paper, A100, forward + backward:\nstandard 40.3 GB, 41.7 ms;\n"
                  "FlashAttention 4.4 GB, 7.3 ms", transform=left.transAxes, fontsize=7, va="top")
        sweep_m = sorted((r for r in fig2 if r["variant"] == "flash_v1" and r.get("ms") is not None),
                         key=lambda r: int(r["fields"]["Bc"]))
        if sweep_m:
            bc = [int(r["fields"]["Bc"]) for r in sweep_m]
            mid.plot(bc, [r["io_model_bytes"] / 1e9 for r in sweep_m], "-", color="tab:blue", label="model")
            mid.plot(bc, [(add(r.get("l2_read_bytes"), r.get("l2_write_bytes")) or float("nan")) / 1e9
                          for r in sweep_m], "o", mfc="none", color="tab:blue", label="measured SM↔L2")
            mid.plot(bc, [(add(r.get("dram_read_bytes"), r.get("dram_write_bytes")) or float("nan")) / 1e9
                          for r in sweep_m], "x", color="tab:blue", label="measured DRAM")
            mid.set_xscale("log", base=2)
            mid.set_yscale("log")
            mid.set_xlabel("block size Bc (Br = min(Bc, d); M = 4·Bc·d floats)")
            mid.set_ylabel("global traffic, GB")
            t = mid.twinx()
            t.plot(bc, [r["ms"] for r in sweep_m], "-s", color="tab:green", label="runtime")
            t.set_ylabel("runtime, ms", color="tab:green")
            t.set_ylim(bottom=0)
            mid.legend(fontsize=7, loc="upper center")
            mid.set_title("FlashAttention-1: block size")
            mid.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"The paper's Fig. 2, forward, fp32 — {device_name(fig2)}")
        path = save_figure(fig, out, "flash_v1_fig2.png")
        written.append(path)
    return written


def fmt_bytes(b):
    if b is None:
        return "n/a"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def summary(records):
    """Per family and variant, the largest size that was timed (or counted, without a GPU)."""
    lines = [f"Device: {device_name(records)}", "",
             "| stage | variant | shape | ms | TFLOP/s | GB/s | × peer | model | measured SM↔L2 "
             "| SM↔L2 / model | DRAM r+w | DRAM / model | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for family, spec in FAMILIES.items():
        metric = spec["speed"]
        peers = {r["shape"]: r for r in records
                 if spec["peer"] and (r["stage"], r["variant"]) == spec["peer"] and r.get(metric)}
        for stage, variant in variants_of(records, spec):
            mine = [r for r in records if r["stage"] == stage and r["variant"] == variant]
            timed = [r for r in mine if r.get("ms") is not None]
            pool = timed or mine
            best = max(pool, key=lambda r: (r.get("size") or 0, r.get("flops") or 0))
            peer = peers.get(best["shape"])
            ratio = (best[metric] / peer[metric]) if peer and best.get(metric) else None
            l2 = add(best.get("l2_read_bytes"), best.get("l2_write_bytes"))
            dram = add(best.get("dram_read_bytes"), best.get("dram_write_bytes"))
            model = best.get("io_model_bytes")
            lines.append("| " + " | ".join([
                stage, variant, best["shape"], fmt(best.get("ms"), ".3f"),
                fmt(best.get("tflops"), ".2f"), fmt(best.get("gbps"), ".0f"), fmt(ratio, ".2f"),
                fmt_bytes(model), fmt_bytes(l2), fmt(l2 / model if l2 and model else None, ".3f"),
                fmt_bytes(dram), fmt(dram / model if dram and model else None, ".3f"),
                fmt(best.get("max_rel_err"), ".1e")]) + " |")
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
    records = merged(read_rows(args.csv))
    if not records:
        sys.exit("report.py: no rows in " + ", ".join(args.csv))
    os.makedirs(args.out, exist_ok=True)
    written = []
    for family, spec in FAMILIES.items():
        written += [plot_io(records, family, spec, args.out), plot_speed(records, family, spec, args.out)]
    written.append(plot_io_probe(records, args.out))
    written += plot_attention(records, args.out)
    text = summary(records)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    for path in filter(None, written):
        print("wrote", path)


if __name__ == "__main__":
    main()
